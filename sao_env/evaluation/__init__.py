"""Evaluators: held-out adaptation curves, continual-learning metrics, statistics."""
