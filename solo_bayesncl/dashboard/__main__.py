"""``python -m solo_bayesncl.dashboard``: the feature dashboard command (:mod:`solo_bayesncl.cli.dashboard`)."""

from solo_bayesncl.cli.dashboard import main

if __name__ == "__main__":
    raise SystemExit(main())
