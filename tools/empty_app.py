"""The benchmark's baseline: the smallest CDK app that ``cdk synth`` accepts here.

``tools/bench.py`` times ``cdk synth`` of this against the real app, with the same
interpreter and the same CLI, so the ratio shows what the app itself costs.

A bare ``cdk.App().synth()`` is not enough: the CLI rejects an app without stacks
("This app contains no stacks"), and cdk.json's @aws-cdk/core:validateAgainstDefaultRules
rejects a stack without resources (F0001). Hence one stack holding one no-op resource.
"""

import aws_cdk as cdk

app = cdk.App()
cdk.CfnWaitConditionHandle(cdk.Stack(app, "Empty"), "Placeholder")
app.synth()
