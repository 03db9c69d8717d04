#!/usr/bin/env bash
# Redraw every committed figure and report.md under results/*/ from its stored results.csv and
# meta.json alone (no benchmark is run): scripts/regenerate_figures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for run in results/*/; do
    if [ -f "$run/results.csv" ]; then python -m allreduce_bench report "$run" >/dev/null && echo "redrawn: ${run}plots/"; fi
done
