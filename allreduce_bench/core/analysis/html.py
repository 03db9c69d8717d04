"""plots/report.html: the report as one self-contained page to open in a browser or send to a
colleague. The same tables and figures report.md has (figures inline as SVG, drawn once:
style.svg_copies), the run's facts, the flags explained, and every measurement with the
numbers of results.csv. No script, no network: it opens offline from the file."""
from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from allreduce_bench.core.analysis.advice import facts_by_run
from allreduce_bench.core.analysis.html_markdown import inline, markdown_html, td
from allreduce_bench.core.analysis.style import unique_ids
from allreduce_bench.core.metrics import CONFIDENCE, ROUNDS_ALPHA, ROUNDS_DISAGREE, TRUSTED_TO
from allreduce_bench.core.results.schema import allreduce_rows

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
dt { font-weight: bold; margin-top: 0.5em; }
pre { background: #f6f6f6; padding: 0.5em; overflow-x: auto; }
"""
FLAGS = (
    ("unstable", f"the row's median cannot be trusted to +-{100 * TRUSTED_TO:.0f}%: its "
     f"{100 * CONFIDENCE:.0f}% confidence interval reaches further, or the interleaved rounds' "
     f"medians spread by more than {100 * ROUNDS_DISAGREE:.0f}%, more than their samples' own spread "
     f"explains (Kruskal-Wallis p < {ROUNDS_ALPHA:g}). The samples' spread alone does not "
     "decide it: on a machine whose calls switch between a fast and a slow state they always vary."),
    ("two states", "the row's samples fell into a fast and a slow state; both medians and "
     "shares are given, since one median would lie between them. The fast state is the "
     "collective's own cost, the slow one the machine getting in the way."),
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


def table_html(table: pd.DataFrame, id_: str | None = None) -> str:
    header = "".join(f"<th>{html.escape(str(c))}</th>" for c in table.columns)
    rows = "".join("<tr>" + "".join(td(str(v), html.escape(str(v))) for v in row) + "</tr>"
                   for row in table.itertuples(index=False))
    ident = f' id="{id_}"' if id_ else ""
    return f"<table{ident}><thead><tr>{header}</tr></thead><tbody>{rows}</tbody></table>"


def _cell(value, digits: int | None) -> str:
    """One measurement's cell: shown to `digits`, the CSV's value exact in data-value."""
    if isinstance(value, float) and value != value:
        return '<td class="num" data-value="">-</td>'
    if digits is None or not isinstance(value, (int, float)) or isinstance(value, bool):
        numeric = ' class="num"' if isinstance(value, int) and not isinstance(value, bool) else ""
        return f'<td{numeric} data-value="{html.escape(str(value))}">{html.escape(str(value))}</td>'
    return f'<td class="num" data-value="{float(value)!r}">{value:.{digits}f}</td>'


def measurements_html(frame: pd.DataFrame) -> str:
    """Every AllReduce row of results.csv, in the order measured."""
    rows = allreduce_rows(frame)
    present = [m for m in MEASUREMENTS if m[0] in rows.columns]
    header = "".join(f'<th data-column="{c}">{html.escape(h)}</th>' for c, h, _ in present)
    body = "".join("<tr>" + "".join(_cell(row[c], d) for c, _, d in present) + "</tr>"
                   for row in rows.to_dict("records"))
    return (f'<table id="measurements"><thead><tr>{header}</tr></thead><tbody>{body}</tbody>'
            "</table>")


def facts_html(frame: pd.DataFrame) -> str:
    """Per run, the summary's lines about its machine (analysis/advice.py)."""
    parts = []
    for run, lines in facts_by_run(frame):
        title = f"<p><strong>{html.escape(run)}</strong></p>" if run else ""
        parts.append(title + "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines)
                     + "</ul>")
    return "".join(parts)


def figure_html(name: str, path: Path, svgs: dict) -> str:
    svg = svgs.get(Path(path))
    if svg is None:  # drawn outside svg_copies: nothing to inline
        return ""
    return (f'<figure id="figure-{html.escape(name)}">{unique_ids(svg, f"{name}-")}'
            f"<figcaption>{html.escape(name)}</figcaption></figure>")


def report_html(frame: pd.DataFrame, runs: pd.DataFrame, tables: list, collectives: str,
                figures: dict[str, Path], svgs: dict, out_dir: Path, sections=()) -> str:
    """The page: the figures no section embeds, the `runs` table and their machines, the
    report's `tables` (report.report_tables), the `collectives` section (report.md's markdown),
    the features' sections, the flags explained, then every measurement."""
    by_file = {Path(p).name: (name, p) for name, p in figures.items()}

    def image(alt: str, target: str) -> str:
        name, path = by_file.get(Path(target).name, (alt, None))
        return figure_html(name, path, svgs) if path is not None else f"<p>{inline(alt)}</p>"

    own = {n for n in figures if any(section.own_figures(n) for section in sections)}
    shown = [figure_html(name, path, svgs) for name, path in figures.items() if name not in own]
    body = ["<h1>AllReduce benchmark report</h1>",
            "<p>busbw = size / time x 2(N-1)/N in decimal GB/s, as nccl-tests defines it; times "
            "are the median over samples of the slowest rank's time per call.</p>"]
    if any(shown):  # seen first, on the first screen; the tables after them give the numbers
        body += ["<h2>Figures</h2>", *shown]
    body += ["<h2>Runs</h2>", table_html(runs), facts_html(frame)]
    for title, note, table in tables:
        body += [f"<h2>{html.escape(title)}</h2>", f"<p>{inline(note)}</p>",
                 table_html(table) if table is not None else ""]
    body.append(markdown_html(collectives, image))
    for section in sections:
        body.append(markdown_html("\n".join(section.markdown(frame, out_dir, figures)), image))
    body.append("<h2>Flags</h2><dl>" + "".join(f"<dt>{html.escape(a)}</dt><dd>{html.escape(b)}</dd>"
                                               for a, b in FLAGS) + "</dl>")
    if len(allreduce_rows(frame)):
        body += ["<h2>Every measurement</h2>", "<p>The AllReduce rows of results.csv, rounded; "
                 "each cell holds the file's exact value as its data-value.</p>", measurements_html(frame)]
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<title>AllReduce benchmark report</title><link rel=\"icon\" href=\"data:,\">"
            f"<style>{STYLE}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")
