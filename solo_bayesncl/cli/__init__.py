"""Entry points: pretraining, offline linear evaluation and kNN evaluation."""
