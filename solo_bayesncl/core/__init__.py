"""The host-independent core: plain PyTorch, no solo-learn or Lightning.

``nonneg`` (non-negativity maps), ``gates`` (the Bernoulli gate and its KL), ``losses`` (the
objectives), ``distributed`` (gathering across processes), ``representations`` (the one
feature-extraction pass) and ``validation`` (checks that name the key, the value and what is
allowed).
"""
