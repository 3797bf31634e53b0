"""The Trainium node's devices: the Neuron and EFA device plugins or DRA drivers, their
admission fences, the claim templates a pod takes them by, and the scheduling both share.
Imports the shared and network rooms.
"""
