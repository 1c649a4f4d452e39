"""The host-independent core: plain PyTorch, no solo-learn or Lightning.

``nonneg`` (non-negativity maps), ``gates`` (the gating head, the Bernoulli gate and its KL),
``losses`` (the objectives: each term's plain definition, differentiated by autograd, and the
loss modules that train with them), ``distributed`` (gathering across processes),
``representations`` (the one feature-extraction pass) and ``validation`` (checks that name the
key, the value and what is allowed).
"""
