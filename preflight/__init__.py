"""Preflight: before ``cdk deploy``, ask the AWS account whether this configuration can be deployed.

``make preflight CONFIG=<file>`` (``python -m preflight --config <file>``) reads, read-only, what the
account offers (zone names, instance type offerings, Service Quotas, capacity reservations, EKS
versions) and each image's registry, and compares them with the configuration, then shows what the configuration costs per hour
(the AWS Price List). The modules, one job each:

- ``facts``: the account's answers as plain frozen data;
- ``aws``: the only module that calls AWS (boto3), turning answers into ``facts``;
- ``quotas``: which Service Quota each node group draws on, and how many vCPUs it needs;
- ``lambda_concurrency``: how many Lambda executions a deploy of the synthesized template holds at
  once, from its dependency graph (pure, like ``quotas``);
- ``checks``: pure functions, configuration and facts in, check results out;
- ``image_inventory``: every image the nodes pull, where from, and the key or pin it comes from (pure);
- ``registries``: asks each image's registry whether it exists (ECR's API, and the public registries'
  OCI API over HTTPS: the one place besides ``aws`` that leaves the process);
- ``image_checks``: the image rows (pure);
- ``costs``: which prices the configuration needs, and the cost rows (pure, like ``quotas``);
- ``report``: the plain-text table;
- ``rewrite``: ``--write``, the zone names in the file, comments and layout kept;
- ``cli``: arguments, exit codes and the one-line error messages.
"""
