"""Runtimes that schedule rollouts and the learner (``sim`` backend in sim.py)."""
