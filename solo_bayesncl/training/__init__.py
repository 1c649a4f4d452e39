"""Training runs: the Lightning Trainer and loggers, auto-resume, the interpretability callback,
and the library halves of pretraining and linear evaluation (the commands are in ``cli``)."""
