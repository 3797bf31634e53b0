"""Constructs for a Trainium training cluster, one concept per module.

Importing this package imports no aws-cdk-lib: the pure-data modules (``instance_catalog``,
``kubectl_layers``, ``cluster_addon_names``) are read by the configuration before any construct
exists. Import constructs from their modules.
"""
