"""Placement: which node and which devices for a job, by topology, load, data
locality and estimated run time (score.py), served to kube-scheduler as an
extender (extender.py) and explained to people by ``accel-autoscaler place``
(place.py)."""
