"""The host-independent core: plain PyTorch, no solo-learn or Lightning.

``nonneg`` (non-negativity maps), ``gates`` (the gating head, the Bernoulli gate and its KL),
``losses`` (the objectives: each term's plain definition and the loss modules),
``fused_losses`` (the hand-written autograd kernels the modules run, tested equal to the
definitions), ``distributed`` (gathering across processes), ``representations`` (the one
feature-extraction pass) and ``validation`` (checks that name the key, the value and what is
allowed).
"""
