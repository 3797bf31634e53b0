"""NetworkPolicy: the tenant namespaces' isolation and the egress rules every chart grants its
pods, and the system namespaces' policies. Imports only the shared room.
"""
