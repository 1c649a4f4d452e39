"""``python -m solo_bayesncl.zoo``: the model zoo command (:mod:`solo_bayesncl.cli.zoo`)."""

from solo_bayesncl.cli.zoo import main

if __name__ == "__main__":
    raise SystemExit(main())
