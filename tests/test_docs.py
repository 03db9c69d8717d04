"""The documentation: README's set-up commands are what .ci/run runs, README stays short,
every doc page is in the site's nav, and no relative link points nowhere. Runs without mkdocs;
the check that the command reference renders every command needs mkdocs-click."""
from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOC = ROOT / "doc"
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
LINK = re.compile(r"\]\(([^)\s]+)\)")
CI_MARKER = "# The README's test command"


def setup_commands() -> tuple[str, str]:
    """README's two set-up commands: the first run, and the tests."""
    section = README.read_text().split("\n## Set up\n", 1)[1].split("\n## ", 1)[0]
    blocks = [block.strip() for block in FENCE.findall(section)]
    assert len(blocks) == 2, f"README's 'Set up' has {len(blocks)} code blocks, not 2"
    return blocks[0], blocks[1]


def ci_test_command() -> list[str]:
    """The README's test command as .ci/run spells it: the torch pin, the package install
    (without `python -m` and `--quiet`) and the commands after the marker comment."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    marker = next(i for i, line in enumerate(lines) if line.startswith(CI_MARKER))
    torch_pin = re.search(r"torch==[\w.+]+", "\n".join(lines[:marker])).group(0)
    install = next(line for line in lines[:marker] if " -e " in line and "pip install" in line)
    install = install.replace("python -m pip", "pip").replace(" --quiet", "")
    after = [line for line in lines[marker + 1:] if line.strip() and not line.startswith("#")]
    return [f"pip install {torch_pin}", install, *after]


def test_readme_test_command_is_what_ci_runs():
    _, tests = setup_commands()
    assert tests.split(" && ") == ci_test_command()


def test_readme_first_command_installs_the_same_torch_and_runs_the_benchmark():
    first, _ = setup_commands()
    steps = first.split(" && ")
    assert steps[0] == ci_test_command()[0]
    assert steps[-1] == "allreduce-bench run"


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into doc/"


def nav_pages() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text.split("\nnav:\n", 1)[1]
    return re.findall(r"^\s+- (?:[^:\n]+: )?([\w./-]+\.md)\s*$", nav, re.M)


def test_every_doc_page_is_in_the_nav_and_every_nav_entry_exists():
    pages = {path.relative_to(DOC).as_posix() for path in DOC.rglob("*.md")}
    listed = nav_pages()
    assert len(listed) == len(set(listed)), "a page is listed twice in mkdocs.yml's nav"
    assert pages - set(listed) == set(), "doc pages missing from mkdocs.yml's nav"
    assert set(listed) - pages == set(), "nav entries without a page in doc/"


def relative_links(path: Path) -> list[str]:
    prose = FENCE.sub("", path.read_text())
    return [link for link in LINK.findall(prose)
            if not re.match(r"[a-z]+:", link) and not link.startswith("#")]


@pytest.mark.parametrize("page", [README, *sorted(DOC.rglob("*.md"))],
                         ids=lambda path: path.relative_to(ROOT).as_posix())
def test_relative_links_point_to_files(page):
    missing = [link for link in relative_links(page)
               if not (page.parent / link.split("#", 1)[0]).exists()]
    assert missing == [], f"{page.name} links to files that do not exist"


def command_paths(command: click.Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [path]
    for name, sub in getattr(command, "commands", {}).items():
        paths += command_paths(sub, (*path, name))
    return paths


def test_the_command_reference_renders_every_command():
    pytest.importorskip("mkdocs_click")
    markdown = pytest.importorskip("markdown")
    from allreduce_bench.cli import main

    html = markdown.markdown((DOC / "cli.md").read_text(),
                             extensions=["attr_list", "tables", "mkdocs-click"])
    for path in command_paths(main):
        anchor = "-".join(("allreduce-bench", *path))
        assert f'id="{anchor}"' in html, f"doc/cli.md renders no section for {' '.join(path)}"


def test_the_emulated_table_is_the_committed_example():
    """doc/emulation.md's table of median times is read off results/example-emulated-2x2: when
    the example is measured again, the table must follow."""
    import pandas as pd

    from allreduce_bench.core.units import parse_size

    rows = pd.read_csv(ROOT / "results" / "example-emulated-2x2" / "results.csv")
    rows = rows[(rows.benchmark == "allreduce") & (rows.world_size == 4)]
    median_ms = rows.set_index(["algorithm", "size_bytes"]).time_us_median / 1000
    table = re.findall(r"^\| (\d+[KMG]) \| (\d+) ms \| (\d+) ms \| (\d+) ms \| (\d+) ms \| \*\*([\d.]+)x\*\* \|$",
                       (DOC / "emulation.md").read_text(), re.M)
    assert table, "doc/emulation.md has no table of median times"
    for size, *times, ratio in table:
        size_bytes = parse_size(size)
        for algorithm, shown in zip(["naive", "native", "ring", "hierarchical"], times):
            assert round(median_ms[algorithm, size_bytes]) == int(shown), (algorithm, size)
        ring_over = median_ms["ring", size_bytes] / median_ms["hierarchical", size_bytes]
        assert f"{ring_over:.2f}" == ratio, size


def test_every_readme_example_writes_where_git_does_not_look():
    """No README example edits the repository (issue 37): each output it names (--out, --out-dir)
    and each default folder a command writes into (results/..., plots/...) is one git ignores.
    scripts/check_readme.py runs them all and checks `git status` itself."""
    import subprocess
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from check_readme import examples

    lines = [command for _, command in examples(README)]
    assert len(lines) >= 15
    outputs = [m for line in lines for m in re.findall(r"--out(?:-dir)? (\S+)", line)]
    outputs += ["results/20261204T000000Z-laptop/results.csv", "plots/example-cpu-gloo/report.md"]
    for path in outputs:
        inside = path if not path.endswith("/") else path + "x"
        ignored = subprocess.run(["git", "check-ignore", "-q", inside], cwd=ROOT).returncode == 0
        assert ignored or Path(path).is_absolute(), f"README example writes {path}, which git would show"


def test_readme_counts_the_algorithms_all_runs_on_gloo():
    from allreduce_bench.core.algorithms import names_for

    counts = re.findall(r"(\d+) on gloo|all (\d+) algorithms", README.read_text())
    assert counts and {int(a or b) for a, b in counts} == {len(names_for("gloo"))}, counts
