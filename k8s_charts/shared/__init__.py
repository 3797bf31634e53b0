"""What every room of the Kubernetes layer builds with: admission-policy objects, checkov
exceptions, container resources, the in-cluster programs as they ship, names and hashes, isolation
and the platform's one-shot Jobs. Imports no other room.
"""
