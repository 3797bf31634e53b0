"""The facts every layer of the project shares, as plain data: the bottom floor of the imports.

``config/``, ``constructs_trn/``, ``k8s_charts/``, ``preflight/`` and ``stacks/`` import from here;
nothing here imports any of them, aws-cdk-lib or cdk8s. One module per kind of fact:

- ``instance_catalog``: what each Trainium instance type carries (chips, cores, EFA cards).
- ``kubernetes_names``: extended resources, the taint, node and pod labels, namespaces, the claim
  and the ``/data`` layout on FSx.
- ``versions``: the Kubernetes versions (kubectl layers), EKS add-on names, the Volcano chart.
- ``stack_outputs``: the names of TrainiumStack's outputs.
- ``images``: the rule an image reference must follow to count as pinned.
- ``kubernetes_plan``: the shape of the plan the charts produce and the stack applies.
- ``cloudwatch_metrics``: the CloudWatch metrics (names, dimension sets, sources) and the log group
  the dashboard reads.
"""
