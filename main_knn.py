"""kNN evaluation of a pretrained checkpoint: ``python main_knn.py CHECKPOINT [--k 10 20]``.

The same as the installed ``solo-bayesncl-knn`` command (:func:`solo_bayesncl.cli.knn.main`).
"""

from solo_bayesncl.cli.invocation import run_main

if __name__ == "__main__":  # a Ctrl-C while torch and solo-learn load is one line too
    raise SystemExit(
        run_main("solo_bayesncl.cli.knn", "kNN evaluation", "before it finished", until_fit=False)
    )
