"""Training runs and what they need: the Volcano Job of a run, data staging, the FSx layout and
TensorBoard. Imports the shared, network and device rooms.
"""
