"""What checks the cluster keeps on itself: the node check, the fabric check, the gang watchdog
and the deployment check's access. Imports the shared, network and device rooms.
"""
