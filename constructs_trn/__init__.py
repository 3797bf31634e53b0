"""Constructs for a Trainium training cluster, one concept per module.

They take typed values (``cluster_facts`` entries, plain strings and numbers, other constructs)
and import neither the configuration nor the charts: the stack wires them together. Importing
this package imports no aws-cdk-lib; import constructs from their modules.
"""
