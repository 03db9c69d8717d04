#!/usr/bin/env python
"""Median |prediction error| of the fitted cost model per algorithm, over sizes >= 1M.

    python scripts/model_error.py RESULTS_DIR [RESULTS_DIR...] [--model model.json] [--min-size 1M]

Fits the model to the given results (or, with --model, judges a stored model on them, e.g. one
fitted to another run) and prints the table the cost-model issue asks for (target <= 20%).
A timing figure, not a test: on a shared machine the numbers move with the load.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from allreduce_bench.core.errors import UsageError  # noqa: E402
from allreduce_bench.core.results.load import load_results  # noqa: E402
from allreduce_bench.core.units import format_size, parse_size  # noqa: E402
from allreduce_bench.model.cost import CostModel, compare, fit, median_abs_error  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="run directories or results.csv files")
    parser.add_argument("--model", help="judge this model.json instead of fitting one")
    parser.add_argument("--min-size", default="1M", help="smallest size counted (default 1M)")
    parser.add_argument("--loss", default="absolute", choices=["absolute", "squares"])
    args = parser.parse_args(argv)
    try:
        threshold = parse_size(args.min_size, "--min-size")
        frame = load_results(args.paths)
        model = CostModel.load(args.model) if args.model else fit(frame, loss=args.loss)
        table = median_abs_error(compare(frame, model), threshold)
    except UsageError as error:
        print(f"model_error: error: {error}", file=sys.stderr)
        return 2
    how = f"model {args.model}" if args.model else f"model fitted to these rows ({args.loss} loss)"
    print(f"Median |predicted - measured| / measured (%), sizes >= {format_size(threshold)}; {how}")
    print(table.round(1).to_string())
    worst = table["all"].max()
    print(f"worst algorithm: {worst:.1f}% ({'within' if worst <= 20 else 'above'} the 20% target)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
