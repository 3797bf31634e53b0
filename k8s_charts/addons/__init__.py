"""The platform add-ons every team shares: the cluster autoscaler, Volcano's scheduler and
admission, priority classes, Pod Security, API fairness and the FSx storage classes and volumes.
Imports the shared room.
"""
