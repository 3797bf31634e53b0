"""The benchmark's baseline: the smallest CDK app that ``cdk synth`` accepts.

``tools/bench.py`` times ``cdk synth`` of this against the real app, with the same
interpreter and the same CLI, so the ratio shows what the app itself costs.

It holds one empty stack because the CLI rejects an app with no stacks at all
("This app contains no stacks", exit 1); an empty stack adds no resources.
"""

import aws_cdk as cdk

app = cdk.App()
cdk.Stack(app, "Empty")
app.synth()
