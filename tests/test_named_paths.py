"""Words that stay true: every package path (`allreduce_bench/x/y.py`), relative path (`x/y.py`)
and dotted module (`allreduce_bench.x.y`) named in the package's comments and docstrings, in
doc/ and in README.md exists. Import statements are left to Python itself."""
from __future__ import annotations

import re
from pathlib import Path

import allreduce_bench
from allreduce_bench.core.algorithms import ENTRY_POINT_GROUP

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_PATH = re.compile(r"allreduce_bench/[A-Za-z0-9_/]*[A-Za-z0-9_](?:\.[a-z]+)?")  # any file's extension
RELATIVE_PATH = re.compile(r"(?<![A-Za-z0-9_./-])(?:[a-z_][a-z0-9_]*/)+[a-z_][a-z0-9_]*\.py\b")
DOTTED = re.compile(r"allreduce_bench(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
# Names that are no file of this package: other projects' sources (nccl-tests, PARAM, the plug-in
# example of doc/algorithms.md) and the prefixes of keys ranks write to torch's store.
NOT_OURS = ("foo/", "my_package/", "tools/", "train/", "src/", "nccl-tests/", "allreduce_bench/foo",
            "allreduce_bench/phases", "allreduce_bench/progress")
# Dotted names that are no module: the plug-ins' entry-point group, the package's lazy attributes.
NOT_MODULES = {ENTRY_POINT_GROUP} | {f"allreduce_bench.{name}" for name in allreduce_bench.__all__}


def _is_module(root: Path, parts: list[str]) -> bool:
    path = root.joinpath(*parts)
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists() or path.is_dir()


def stale_names(root: Path = ROOT) -> list[str]:
    """`file:line: name` for every named path or module under `root` that does not exist."""
    files = [*sorted(root.glob("allreduce_bench/**/*.py")), root / "README.md", *sorted(root.glob("doc/**/*.md"))]
    python_files = [str(p.relative_to(root)) for p in root.rglob("*.py") if ".git" not in p.parts]
    stale = []
    for path in filter(Path.exists, files):
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if path.suffix == ".py" and re.match(r"\s*(from|import)\s", line):
                continue
            names = [m.group(0) for m in PACKAGE_PATH.finditer(line) if not (root / m.group(0)).exists()]
            names += [m.group(0) for m in RELATIVE_PATH.finditer(line)
                      if not m.group(0).startswith("allreduce_bench/")
                      and not any(f == m.group(0) or f.endswith("/" + m.group(0)) for f in python_files)]
            for m in DOTTED.finditer(line):
                parts = m.group(0).split(".")
                if "/" in (line[m.end():m.end() + 1], line[max(0, m.start() - 1):m.start()]):
                    continue  # a file name such as allreduce_bench.log/
                if m.group(0) not in NOT_MODULES and not any(
                        _is_module(root, parts[:k]) for k in range(len(parts), 1, -1)):
                    names.append(m.group(0))
            stale += [f"{path.relative_to(root)}:{number}: {name}" for name in names
                      if not name.startswith(NOT_OURS)]
    return stale


def test_every_named_path_and_module_exists():
    stale = stale_names()
    assert not stale, "names of paths or modules that do not exist:\n" + "\n".join(stale)


def test_a_stale_name_of_each_kind_is_found(tmp_path):
    package = tmp_path / "allreduce_bench" / "core"
    package.mkdir(parents=True)
    (package / "units.py").write_text('"""See core/units.py and allreduce_bench/core/units.py."""\n')
    (package / "old.py").write_text("# moved: measure/peaks.py, allreduce_bench/analysis/peaks.py,\n"
                                    "# allreduce_bench.core.units.parse_size, allreduce_bench.analysis.peaks\n"
                                    "from allreduce_bench.gone import x  # an import: Python checks it\n")
    (tmp_path / "doc").mkdir()
    (tmp_path / "doc" / "page.md").write_text("`allreduce_bench/core/gone.py`, nccl-tests' src/common.cu\n")
    assert stale_names(tmp_path) == [
        "allreduce_bench/core/old.py:1: allreduce_bench/analysis/peaks.py",
        "allreduce_bench/core/old.py:1: measure/peaks.py",
        "allreduce_bench/core/old.py:2: allreduce_bench.analysis.peaks",
        "doc/page.md:1: allreduce_bench/core/gone.py",
    ]
