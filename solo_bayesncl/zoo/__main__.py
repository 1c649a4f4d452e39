"""Entry point of ``python -m solo_bayesncl.zoo``."""

from .cli import main

raise SystemExit(main())
