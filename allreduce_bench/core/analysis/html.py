"""plots/report.html: report.md as one self-contained page (figures inline as SVG, no script, no
network) to open offline or send, with every measurement's exact number."""
from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from allreduce_bench.core.analysis.html_markdown import markdown_html, markdown_table
from allreduce_bench.core.analysis.noise import TWO_STATES, UNSTABLE
from allreduce_bench.core.analysis.style import SavedFigure
from allreduce_bench.core.analysis.tables import algorithm_rank
from allreduce_bench.core.results.schema import allreduce_rows

if TYPE_CHECKING:
    from allreduce_bench.core.analysis.report import Report

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 72em; padding: 0 1em;
       color: #222; line-height: 1.4; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; }
th { background: #f2f2f2; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0 2em; }
figure svg { max-width: 100%; height: auto; display: block; }
figcaption { color: #555; font-size: 0.9em; }
pre { background: #f6f6f6; padding: 0.5em; overflow-x: auto; }
"""
FLAGS = (
    ("unstable", UNSTABLE),
    ("two states", TWO_STATES),
    ("placement", "where the ranks ran: ranks sharing a CPU, or unbound, measure the scheduler "
     "as well as the collective."),
    ("#wrong", "elements whose result differed from the exact expected sum, over all ranks: "
     "any number above 0 means the algorithm is wrong, whatever its speed."),
)
# every AllReduce row's numbers, as results.csv holds them: (column, heading, digits shown)
MEASUREMENTS = (("algorithm", "algorithm", None), ("world_size", "world size", None),
                ("size_bytes", "size (B)", None), ("time_us_median", "time (us)", 1),
                ("time_us_ci_low", "interval low (us)", 1), ("time_us_ci_high", "interval high (us)", 1),
                ("time_us_p95", "p95 (us)", 1), ("busbw_GBps", "busbw (GB/s)", 3),
                ("fast_us_median", "fast (us)", 1), ("fast_share", "fast share", 2),
                ("slow_us_median", "slow (us)", 1), ("slow_share", "slow share", 2),
                ("unstable", "unstable", None), ("wrong", "#wrong", None))


def measurements(frame: pd.DataFrame) -> pd.DataFrame:
    """Every AllReduce row, per run in sizes' order for each algorithm and world size."""
    rows = allreduce_rows(frame)
    run = rows["source"].map({s: i for i, s in enumerate(dict.fromkeys(rows["source"]))}) \
        if "source" in rows.columns else 0
    return rows.assign(_run=run, _algorithm=rows["algorithm"].astype(str).map(algorithm_rank)).sort_values(
        ["_run", "_algorithm", "world_size", "size_bytes"], kind="stable")[
        [c for c, _, _ in MEASUREMENTS if c in rows.columns]]


def _shown(value, digits: int | None):
    if digits is None or not isinstance(value, (int, float)) or isinstance(value, bool) or value != value:
        return value
    return f"{value:.{digits}f}"


def _exact(value) -> str:
    """The data-value of a cell: results.csv's value exactly ('' where empty)."""
    if isinstance(value, float) and value != value:
        return ""
    return repr(float(value)) if isinstance(value, float) else str(value)


def _measurements_part(rows: pd.DataFrame) -> tuple[str, Callable[[list], None]]:
    """The "Every measurement" section, and what marks its cells with the exact values."""
    digits = {c: d for c, _, d in MEASUREMENTS}
    shown = pd.DataFrame({h: [_shown(v, digits[c]) for v in rows[c]] for c, h, _ in MEASUREMENTS
                          if c in rows.columns})
    text = "\n".join(["## Every measurement", "", "The AllReduce rows of results.csv, rounded; each "
                      "cell holds the file's exact value as its data-value.", "", markdown_table(shown)])
    exact = iter([_exact(v) for row in rows.itertuples(index=False) for v in row])  # td by td

    def decorate(tokens) -> None:
        columns = iter(rows.columns)
        for token in tokens:
            if token.type == "table_open":
                token.attrSet("id", "measurements")
            elif token.type == "th_open":
                token.attrSet("data-column", next(columns))
            elif token.type == "td_open":
                token.attrSet("data-value", next(exact))
    return text, decorate


def report_html(report: Report, frame: pd.DataFrame, figures: dict[str, Path]) -> str:
    """The page: the figures that render inline (others as their alt text), `report`, the flags, every row."""
    by_file = {Path(path).name: (name, path) for name, path in figures.items()}

    def image(alt: str, target: str) -> str:
        name, path = by_file.get(Path(target).name, (alt, None))
        svg = path.svg(f"{name}-") if isinstance(path, SavedFigure) else None
        if svg is None:
            return f"<p>{html.escape(alt)}</p>"
        return f'<figure id="figure-{html.escape(name)}">{svg}<figcaption>{html.escape(name)}</figcaption></figure>'

    flags = ["## Flags", ""] + [f"- **{flag}**: {meaning}" for flag, meaning in FLAGS] + [""]
    body = [markdown_html("\n".join(report.head + report.figures + report.body + flags), image)]
    rows = measurements(frame)
    if len(rows):
        text, decorate = _measurements_part(rows)
        body.append(markdown_html(text, image, decorate))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>AllReduce benchmark report</title><link rel=\"icon\" href=\"data:,\">"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
