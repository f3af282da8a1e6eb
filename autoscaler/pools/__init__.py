"""Node-pool providers (see base.py)."""
