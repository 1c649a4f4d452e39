"""``python -m solo_bayesncl.benchmark``: the side-by-side benchmark command (:mod:`solo_bayesncl.cli.benchmark`)."""

from solo_bayesncl.cli.benchmark import main

if __name__ == "__main__":
    raise SystemExit(main())
