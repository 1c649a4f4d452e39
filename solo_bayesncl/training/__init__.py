"""Training runs: Trainer, loggers, auto-resume, callbacks, pretraining and linear evaluation."""
