"""cdk8s charts for the cluster's Kubernetes layer.

Platform charts (device plugins, the Volcano queue, etcd for TorchElastic rendezvous, FSx
storage) each live in their own module and synthesize plain manifests with deterministic names,
so the CDK stack can apply each one with ``add_cdk8s_chart`` under its own ``cdk8s.App``.
No aws-cdk-lib import here: values such as a file system id arrive as plain (possibly token)
strings.
"""
