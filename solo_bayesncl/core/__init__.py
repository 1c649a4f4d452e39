"""The host-independent core, plain PyTorch: ``nonneg``, ``gates``, ``losses`` (each term's plain
definition under autograd, and the loss modules), ``distributed``, ``representations`` (the
one feature-extraction pass), ``validation`` and ``threads`` (a run's thread count: resolved,
given to torch, recorded)."""
