"""plots/report.html: one self-contained page with the report's tables, figures inline as SVG,
the run's facts, the flags explained and every measurement with the CSV's numbers; and the
same page in a real headless browser (Debian's chromium), where it is installed."""
from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import synthetic_runs
from click.testing import CliRunner

from allreduce_bench.cli import main
from allreduce_bench.core.analysis.html_markdown import markdown_table
from allreduce_bench.core.analysis.report import HTML_FILE, write_report
from allreduce_bench.core.results.load import load_results
from allreduce_bench.plugins import hooks

MEASURED = ("time_us_median", "busbw_GBps", "time_us_ci_low", "time_us_ci_high", "slow_share")


class Cells(HTMLParser):
    """Every <td> of the table with id `table_id`: (data-value, the text shown), row by row."""

    def __init__(self, table_id: str):
        super().__init__()
        self.table_id, self.inside, self.rows, self.cell = table_id, False, [], None
        self.columns = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self.inside = attrs.get("id") == self.table_id
        elif self.inside and tag == "th" and "data-column" in attrs:
            self.columns.append(attrs["data-column"])
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag == "td":
            self.cell = [attrs.get("data-value"), ""]

    def handle_data(self, data):
        if self.cell is not None:
            self.cell[1] += data

    def handle_endtag(self, tag):
        if tag == "td" and self.cell is not None:
            self.rows[-1].append(tuple(self.cell))
            self.cell = None
        elif tag == "table":
            self.inside = False

    def frame(self) -> pd.DataFrame:
        rows = [row for row in self.rows if row]
        return pd.DataFrame([[value for value, _ in row] for row in rows], columns=self.columns).assign(
            **{f"shown {c}": [row[i][1] for row in rows] for i, c in enumerate(self.columns)})


@pytest.fixture
def run_dir(tmp_path):
    return synthetic_runs.write_run(tmp_path / "run", synthetic_runs.rows(synthetic_runs.default_states()),
                                    world_sizes_left_out=[4])


def in_size_order(csv: pd.DataFrame) -> pd.DataFrame:
    """results.csv's rows as the page lists them: per algorithm and world size, sizes ascending."""
    return csv.sort_values(["algorithm", "world_size", "size_bytes"], kind="stable", ignore_index=True)


def check_numbers_are_the_csvs(cells: pd.DataFrame, csv: pd.DataFrame) -> None:
    """Every measurement's exact value (data-value) and the number shown, against results.csv."""
    assert len(cells) == len(csv)
    for column in MEASURED:
        exact = [float(v) if v else math.nan for v in cells[column]]
        assert np.array_equal(exact, csv[column].astype(float), equal_nan=True), column
        shown = pd.Series([float(v) if v != "-" else math.nan for v in cells[f"shown {column}"]])
        pd.testing.assert_series_equal(shown, csv[column].round(3 if column == "busbw_GBps" else
                                                                  2 if "share" in column else 1),
                                       check_names=False, atol=1e-9)


def test_report_html_is_one_page_with_every_figure_inline_and_the_csvs_numbers(run_dir):
    figures, path = write_report(load_results(run_dir), run_dir / "plots")
    page = (path.parent / HTML_FILE).read_text(encoding="utf-8")
    assert page.count("<svg") == len(figures) >= 3  # bandwidth, latency, speedup (N=2 only: no scaling)
    assert "Only world size 2 was measured: scaling compares busbw and time across world sizes" in page
    assert "<script" not in page and "<img" not in page
    linked = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert all(link.startswith(("data:", "#")) for link in linked), linked  # nothing to fetch
    for heading in ("Runs", "Flags", "Peak bus bandwidth", "Unstable measurements", "Two states",
                    "Figures", "Every measurement"):
        assert f"<h2>{heading}</h2>" in page
    assert "idle driver haltpoll" in page and "world sizes left out: 4" in page
    cells = Cells("measurements")
    cells.feed(page)
    check_numbers_are_the_csvs(cells.frame(), in_size_order(pd.read_csv(run_dir / "results.csv")))


def test_every_measurement_is_in_size_order_and_says_yes_or_no_as_every_table_does(tmp_path):
    rows = synthetic_runs.rows(synthetic_runs.default_states())
    run = synthetic_runs.write_run(tmp_path / "run", rows.iloc[[2, 4, 0, 5, 1, 3]])  # as rounds appended them
    write_report(load_results(run), run / "plots")
    cells = Cells("measurements")
    cells.feed((run / "plots" / HTML_FILE).read_text(encoding="utf-8"))
    shown = cells.frame()
    order = list(zip(rows["algorithm"], rows["size_bytes"]))
    assert list(zip(shown["algorithm"], shown["size_bytes"].astype(int))) == order
    assert set(shown["shown unstable"]) == {"yes", "no"}  # as the other tables say it, not True/False
    assert list(shown["unstable"]) == [str(v) for v in rows["unstable"]]  # the file's value, exactly
    assert "| yes | no |" in markdown_table(pd.DataFrame({"a": [True], "b": [np.False_]}))


def test_svg_ids_are_unique_across_the_page(run_dir):
    write_report(load_results(run_dir), run_dir / "plots")
    page = (run_dir / "plots" / HTML_FILE).read_text(encoding="utf-8")
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids))
    assert all(target in ids for target in re.findall(r'href="#([^"]+)"', page))


def test_report_command_writes_the_page_beside_report_md(run_dir):
    result = CliRunner().invoke(main, ["report", str(run_dir), "--out-dir", str(run_dir / "plots")])
    assert result.exit_code == 0, result.output
    assert (run_dir / "plots" / HTML_FILE).exists() and (run_dir / "plots" / "report.md").exists()
    assert HTML_FILE in result.output


# --- in a real browser -----------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# what the probe copy of the page reports: each figure's box, the page's height, every resource
# loaded, and the measurements table's cells as the browser renders them
PROBE = """<script>
const boxes = [...document.querySelectorAll('figure svg')].map(s => {
  const r = s.getBoundingClientRect();
  return {x: r.left + scrollX, y: r.top + scrollY, w: r.width, h: r.height,
          visibility: getComputedStyle(s).visibility, display: getComputedStyle(s).display};
});
const cells = [...document.querySelectorAll('#measurements tbody tr')].map(
  tr => [...tr.querySelectorAll('td')].map(td => td.innerText));
// per table: its header's cell count and each body row's, as the browser lays them out
const tables = [...document.querySelectorAll('table')].map(t => [
  t.querySelectorAll('thead th').length,
  [...t.querySelectorAll('tbody tr')].map(tr => tr.querySelectorAll('td').length)]);
const out = document.createElement('pre');
out.id = 'probe';
out.textContent = JSON.stringify({boxes, height: document.documentElement.scrollHeight,
  resources: performance.getEntriesByType('resource').map(e => e.name), cells, tables});
document.body.appendChild(out);
</script>"""
WIDTH = 1280
FIRST_SCREEN = 1000  # px: what a 1280-px-wide window shows before any scrolling


def chromium(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           "--force-device-scale-factor=1", "--no-first-run", *args],
                          capture_output=True, text=True, timeout=timeout)


def probe(page: Path) -> dict:
    copy = page.with_name("probe.html")
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"),
                    encoding="utf-8")
    done = chromium(f"--window-size={WIDTH},1000", "--dump-dom", copy.as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stderr[-2000:]
    return json.loads(html.unescape(found.group(1)))


def inked_share(image, box: dict) -> float:
    """The share of pixels in `box` that are not near-white."""
    crop = image.crop((int(box["x"]), int(box["y"]), int(box["x"] + box["w"]),
                       int(box["y"] + box["h"]))).convert("L")
    return float((np.asarray(crop) < 200).mean())


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_report_html_in_a_headless_browser(run_dir, tmp_path):
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium): no browser to open report.html in")
    from PIL import Image

    # with the features' sections: the cost model's tables are on the page too
    figures, path = write_report(load_results(run_dir), run_dir / "plots", sections=hooks().sections)
    page = path.parent / HTML_FILE
    seen = probe(page)
    assert seen["resources"] == []  # offline: the page loads nothing
    assert len(seen["boxes"]) == len(figures)
    for box in seen["boxes"]:
        assert box["w"] > 200 and box["h"] > 100 and box["visibility"] == "visible", box
    # seen before read: the first figure starts on the first screen (it started ~2,900 px down,
    # after eight tables), and every table lays one cell under each heading
    assert seen["boxes"][0]["y"] < FIRST_SCREEN - 100, seen["boxes"][0]
    assert [t for t in seen["tables"] if any(cells != t[0] for cells in t[1])] == []

    shot = tmp_path / "report.png"
    done = chromium(f"--window-size={WIDTH},{int(seen['height'])}", "--enable-logging=stderr",
                    "--v=0", f"--screenshot={shot}", page.as_uri())
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console  # no console message at all, errors included
    image = Image.open(shot)
    assert image.size == (WIDTH, int(seen["height"]))
    for box in seen["boxes"]:
        assert inked_share(image, box) > 0.01, box  # drawn, not a blank box

    csv = in_size_order(pd.read_csv(run_dir / "results.csv"))
    rendered = pd.DataFrame(seen["cells"])
    assert len(rendered) == len(csv)
    cells = Cells("measurements")
    cells.feed(page.read_text(encoding="utf-8"))
    columns = cells.columns
    time_column = columns.index("time_us_median")
    assert [float(v) for v in rendered[time_column]] == list(csv["time_us_median"].round(1))
