"""Every markdown table the project writes keeps its header's cell count in every row: the one
writer escapes a `|` inside a cell, report.html reads it back as one cell, the cost model's
sections included, and the committed examples' reports (markdown and HTML) agree. (Every
report.md a test writes is checked after it too: tests/conftest.py.)"""
from __future__ import annotations

import math
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
import synthetic_runs
from markdown_tables import cell_count, mismatched, mismatched_in

from allreduce_bench.core.analysis.html_markdown import markdown_html, markdown_table
from allreduce_bench.core.analysis.report import write_report
from allreduce_bench.core.results.load import load_results
from allreduce_bench.plugins import hooks

RESULTS = Path(__file__).resolve().parents[2] / "results"


class RowCells(HTMLParser):
    """Per <table>: the <th> count of its header and the <td> count of each body row."""

    def __init__(self):
        super().__init__()
        self.tables: list[tuple[int, list[int]]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append((0, []))
        elif tag == "th":
            self.tables[-1] = (self.tables[-1][0] + 1, self.tables[-1][1])
        elif tag == "tr" and self.tables[-1][0]:
            self.tables[-1][1].append(0)
        elif tag == "td":
            self.tables[-1][1][-1] += 1

    def mismatched(self) -> list[tuple[int, list[int]]]:
        return [(head, rows) for head, rows in self.tables if any(n != head for n in rows[1:])]


def html_mismatched(page: str) -> list:
    parser = RowCells()
    parser.feed(page)
    return parser.mismatched()


def test_a_pipe_or_nan_in_a_cell_keeps_the_row_one_cell_per_heading():
    table = pd.DataFrame({"median |error| (%)": ["a|b", "c"], "rate": [math.nan, 1.5]})
    text = markdown_table(table)
    assert [cell_count(line) for line in text.splitlines()] == [2, 2, 2, 2]
    assert "| - |" in text and "nan" not in text
    page = markdown_html(text, lambda alt, path: "")
    assert "<th>median |error| (%)</th>" in page and "<td>a|b</td>" in page
    assert html_mismatched(page) == []
    # a row of dashes is a row, not a second separator
    assert markdown_html(markdown_table(pd.DataFrame({"x": ["-"]})), lambda a, p: "").count("<td") == 1


def test_the_cost_model_sections_tables_have_one_cell_per_heading(tmp_path):
    run = synthetic_runs.write_run(tmp_path / "run", synthetic_runs.rows(synthetic_runs.default_states()))
    write_report(load_results(run), run / "plots", sections=hooks().sections)
    text = (run / "plots" / "report.md").read_text()
    assert "## Cost model per collective" in text and "median error (%, absolute)" in text
    assert "nan" not in text.split("## Cost model per collective")[1]
    assert mismatched(text) == []
    assert html_mismatched((run / "plots" / "report.html").read_text()) == []


@pytest.mark.parametrize("example", sorted(p.name for p in RESULTS.glob("example-*")))
def test_the_committed_examples_reports_have_one_cell_per_heading(example):
    assert mismatched_in(RESULTS / example) == {}
    for page in (RESULTS / example).rglob("*.html"):
        assert html_mismatched(page.read_text(encoding="utf-8")) == [], page
