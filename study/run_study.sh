#!/bin/sh
# Runs (or resumes) the whole study: study_seeds, then study_prior, then study_scenes.
#
#   sh study/run_study.sh [RESULTS_DIR]      # from the repository root; default: study/records
#
# The three presets share one budget, and study_prior shares study_seeds' runs folder, so a run
# that two presets name (NCL, BayesNCL, bayesncl_rho0.3 on Fashion-MNIST) trains once. Finished
# runs are skipped and an interrupted run resumes, so the same command continues a stopped study.
RESULTS=${1:-study/records}
mkdir -p "$RESULTS/study_seeds/runs" "$RESULTS/study_prior" "$RESULTS/study_scenes"
[ -e "$RESULTS/study_prior/runs" ] || ln -s ../study_seeds/runs "$RESULTS/study_prior/runs"
for preset in study_seeds study_prior study_scenes; do
    echo "== $preset $(date -u +%FT%TZ)"
    python3 -m solo_bayesncl.benchmark --preset "study/presets/$preset.yaml" --out "$RESULTS/$preset" ||
        echo "== $preset stopped with status $?"
done
