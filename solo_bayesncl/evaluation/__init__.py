"""Interpretability evaluation of a trained checkpoint: the report, the paper's protocol, the
background measures and kNN accuracy."""
