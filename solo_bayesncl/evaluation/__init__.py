"""Interpretability evaluation: the training-time callback and the report command."""
