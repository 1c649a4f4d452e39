"""Side-by-side benchmark of SimCLR, MoCo v2+, NCL and BayesNCL at equal budget.

    python -m solo_bayesncl.benchmark --preset cpu

For each method and seed of a preset (:mod:`solo_bayesncl.benchmark.presets`): pretraining with
the shared-budget configs, solo-learn's offline linear probe and weighted kNN, the
interpretability report, wall time per epoch and peak memory; then a Markdown and a CSV table
and plots in the preset's results folder (:mod:`solo_bayesncl.benchmark.table`, the paired
differences over seeds of :mod:`solo_bayesncl.benchmark.paired`, the curves against the epoch of
:mod:`solo_bayesncl.benchmark.curves`, :mod:`solo_bayesncl.benchmark.plots`). Finished runs are
recognised by their config and skipped; a stage counts as finished only when it reached its last
epoch, and an interrupted run resumes from its last checkpoint (:mod:`solo_bayesncl.benchmark.run_one`). Each stage records its CPU
time and the machine's load beside its wall time (:mod:`solo_bayesncl.benchmark.machine`).
"""
