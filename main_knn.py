"""kNN evaluation of a pretrained checkpoint: ``python main_knn.py CHECKPOINT [--k 10 20]``."""

from solo_bayesncl.registration import require_solo_learn

if __name__ == "__main__":
    require_solo_learn("main_knn.py")
    from solo_bayesncl.cli.knn import main

    raise SystemExit(main())
