"""kNN evaluation of a pretrained checkpoint: ``python main_knn.py CHECKPOINT [--k 10 20]``.

The same as the installed ``solo-bayesncl-knn`` command (:func:`solo_bayesncl.cli.knn.main`).
"""

from solo_bayesncl.cli.knn import main

if __name__ == "__main__":
    raise SystemExit(main())
