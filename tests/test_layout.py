"""The package's shape (doc/architecture.md), kept by import-linter's contracts in setup.cfg: the
core's folders in layers (measuring and analysing siblings that never import each other, config
under both and without torch), the core importing no feature, each feature importing the core and
only the features its row of the features table names, no cycles. Here: the contracts are kept,
they break on planted imports, and they say what the features table says. Besides: no function
over 60 lines, every imported name exists, registries hold callables (no "module:function"
strings)."""
from __future__ import annotations

import ast
import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "allreduce_bench"
ARCHITECTURE = ROOT / "doc" / "architecture.md"
SETUP_CFG = ROOT / "setup.cfg"
MAX_FUNCTION_LINES = 60


def features(text: str | None = None) -> dict[str, set[str]]:
    """{feature: the features it may import}, from the features table (between its markers)."""
    text = ARCHITECTURE.read_text() if text is None else text
    table = re.search(r"<!-- features -->(.*?)<!-- /features -->", text, re.S).group(1)
    found = {}
    for row in table.strip().splitlines()[2:]:
        cells = [cell.strip() for cell in row.strip().strip("|").split("|")]
        folder = cells[1].strip("`/ ")
        found[folder] = set(re.findall(r"`(\w+)/`", cells[3]))
    return found


def contracts() -> dict[str, configparser.SectionProxy]:
    config = configparser.ConfigParser()
    config.read(SETUP_CFG)
    return {name.split(":", 2)[2]: config[name] for name in config.sections()
            if name.startswith("importlinter:contract:")}


def listed(value: str) -> set[str]:
    return {line.strip().removeprefix("allreduce_bench.") for line in value.splitlines() if line.strip()}


def test_the_contracts_are_kept(capsys):
    kept = lint_imports(str(SETUP_CFG), no_cache=True, no_logo=True) == 0
    assert kept, capsys.readouterr().out


def test_planted_imports_break_the_contracts(tmp_path):
    """On a copy of the package: measure -> analysis, config -> torch, core -> feature, a feature
    -> a feature not in its row and a cycle each break their contract (the planted imports of
    the closing note)."""
    shutil.copytree(PACKAGE, tmp_path / "allreduce_bench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(SETUP_CFG, tmp_path)
    for module, planted in [("core/measure/timing.py", "allreduce_bench.core.analysis.floor"),
                            ("core/config/checks.py", "torch"),
                            ("core/results/store.py", "allreduce_bench.health.verdicts"),
                            ("links/summary.py", "allreduce_bench.ddp.analysis"),
                            ("health/reference.py", "allreduce_bench.health.benchmark")]:
        with open(tmp_path / "allreduce_bench" / module, "a") as f:
            f.write(f"\n\ndef planted():\n    import {planted}  # noqa\n")
    found = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command as c; c()",
                            "--no-cache"], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": ""},
                           capture_output=True, text=True, timeout=120)
    assert found.returncode == 1, found.stdout + found.stderr
    out = " ".join(found.stdout.split())  # rich wraps long lines
    for broken in ["The core's folders, top to bottom", "Measuring (measure, sweep, launch) never imports analysing",
                   "Config and analysis import no torch", "The core imports no feature",
                   "links/ imports the core and, of the features, none", "No cycles between"]:
        assert re.search(re.escape(broken) + r".*? BROKEN", out), (broken, found.stdout)
    for line in ["allreduce_bench.core.measure.timing -> allreduce_bench.core.analysis.floor (l.",
                 "allreduce_bench.core.config.checks -> torch (l.",
                 "allreduce_bench.core.results.store -> allreduce_bench.health.verdicts (l.",
                 "allreduce_bench.links.summary -> allreduce_bench.ddp.analysis (l.",
                 "No cycles are allowed in allreduce_bench.health"]:
        assert line in out, (line, found.stdout)
    assert re.search(r"Contracts: \d+ kept, 6 broken\.", out), found.stdout


def test_the_contracts_say_what_the_features_table_says():
    """Every feature has a contract forbidding exactly the features its row does not name (and
    the command group); the core's contract forbids every feature; every core folder is in a
    layer (the layers contract is exhaustive)."""
    table, found = features(), contracts()
    assert listed(found["core-no-feature"]["forbidden_modules"]) == set(table) | {"cli"}
    for feature, may in table.items():
        contract = found[f"feature-{feature.replace('_', '-')}"]
        assert listed(contract["source_modules"]) == {feature}
        assert listed(contract["forbidden_modules"]) == (set(table) - may - {feature}) | {"cli"}, feature
    assert {name for name in found if name.startswith("feature-")} == {
        f"feature-{f.replace('_', '-')}" for f in table}
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")} - {"core"}
    assert folders == set(table), folders ^ set(table)
    assert found["core-layers"].getboolean("exhaustive")


def _is_module(dotted: str) -> bool:
    base = ROOT / dotted.replace(".", "/")
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def test_no_feature_module_name_is_in_two_folders():
    """A feature's code in its own folder: no module outside it is named after it."""
    table = features()
    stray = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
             if p.stem in table and p.parent.name != p.stem]
    assert not stray, stray


def test_no_function_is_over_sixty_lines():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "functions over 60 lines:\n" + "\n".join(long)


def test_registries_hold_callables_not_strings():
    """A "module:function" string hides an edge from the import graph."""
    spec = re.compile(r"^allreduce_bench(\.\w+)+:\w+$")
    found = [f"{p.relative_to(ROOT)}:{node.lineno} {node.value!r}" for p in PACKAGE.rglob("*.py")
             for node in ast.walk(ast.parse(p.read_text()))
             if isinstance(node, ast.Constant) and isinstance(node.value, str) and spec.match(node.value)]
    assert not found, found


def test_every_name_imported_from_the_package_exists():
    """A name moved between modules breaks only the path that imports it (a function-level import
    runs late): check every `from allreduce_bench.x import name`, wherever it is, statically."""
    import importlib

    missing = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.startswith("allreduce_bench")):
                continue
            module = importlib.import_module(node.module)
            missing += [f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{alias.name}"
                        for alias in node.names
                        if not hasattr(module, alias.name) and not _is_module(f"{node.module}.{alias.name}")]
    assert not missing, "imported names that do not exist:\n" + "\n".join(missing)
