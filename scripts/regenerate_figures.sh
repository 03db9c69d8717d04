#!/usr/bin/env bash
# Redraw every committed figure and report.md under results/*/ from its stored results.csv and
# meta.json alone (no benchmark is run); where a run has a fitted model.json, refit it and
# redraw plots/model.png too: scripts/regenerate_figures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for run in results/*/; do
    [ -f "$run/results.csv" ] || continue
    # the model first: report.md has a section from model.json
    if [ -f "$run/model.json" ]; then python -m allreduce_bench model fit "$run" --out "$run" >/dev/null; fi
    python -m allreduce_bench report "$run" --out-dir "${run}plots" --force >/dev/null
    echo "redrawn: ${run}plots/"
done
