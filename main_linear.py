"""Offline linear evaluation of a pretrained checkpoint (any of the four methods).

    python main_linear.py "pretrained_feature_extractor='trained_models/bayesncl/RUN/NAME-ep=1.ckpt'"
    python main_linear.py "pretrained_feature_extractor='PATH'" max_epochs=10 data.fraction=-1

The dataset, fraction and crop size come from the checkpoint's args.json unless overridden. The
same as the installed ``solo-bayesncl-linear`` command (:func:`solo_bayesncl.cli.linear.main`).
"""

from solo_bayesncl.cli.invocation import run_main

if __name__ == "__main__":  # a Ctrl-C while torch and solo-learn load is one line too
    raise SystemExit(run_main("solo_bayesncl.cli.linear", "linear evaluation"))
