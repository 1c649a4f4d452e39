"""A run's config before anything is built: resolution around solo-learn's ``parse_cfg``, the
machine (devices, precision), the global batch and the shipped Hydra configs."""
