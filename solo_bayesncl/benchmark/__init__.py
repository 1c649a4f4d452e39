"""Side-by-side benchmark of SimCLR, MoCo v2+, NCL and BayesNCL at equal budget.

    python -m solo_bayesncl.benchmark --preset cpu

For each method and seed of a preset (:mod:`.presets`): pretraining at the shared budget,
solo-learn's linear probe and weighted kNN, the interpretability report, time and peak memory;
then Markdown and CSV tables and plots (:mod:`.table`, :mod:`.paired`, :mod:`.curves`,
:mod:`.plots`). Finished runs are skipped; an interrupted run resumes (:mod:`.run_one`).
"""
