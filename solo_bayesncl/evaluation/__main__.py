"""``python -m solo_bayesncl.evaluation CHECKPOINT --out REPORT_DIR``: the evaluation report."""

from solo_bayesncl.cli.evaluate import main

if __name__ == "__main__":
    raise SystemExit(main())
