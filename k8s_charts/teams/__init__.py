"""One tenant each: namespaces, quotas, Volcano queues, settings, etcd for rendezvous and the
tenant admission rules. Imports the shared, network and add-on rooms.
"""
