#!/bin/sh
# Runs (or resumes) the study at a trained budget: study_budget_scenes and study_budget
# (50 epochs, budget curves every 5 epochs), seed by seed, alternating the two presets, so that
# every setting on both datasets has a seed before any has two.
#
#   sh results/run_budget_study.sh [RESULTS_DIR] [SEEDS]   # from the repository root
#
# Defaults: results, "1 2 3 4 5". Finished runs are skipped and an interrupted run resumes, so
# the same command continues a stopped study; each preset's table is rewritten after every seed
# from its finished runs only.
RESULTS=${1:-results}
SEEDS=${2:-1 2 3 4 5}
for seed in $SEEDS; do
    for preset in study_budget_scenes study_budget; do
        echo "== $preset seed $seed $(date -u +%FT%TZ)"
        python3 -m solo_bayesncl.benchmark --preset "$preset" --out "$RESULTS/$preset" \
            --seeds "$seed" || echo "== $preset seed $seed stopped with status $?"
    done
done
