"""The package's shape (doc/architecture.md): one measuring core whose folders import only to
their right in the core's order, and one package per feature that imports the core, itself and
only the features its row of the features table names. The core imports no feature. No import
cycles, no function over 60 lines, every imported name exists, registries hold callables (no
"module:function" strings) and no module steers itself through a variable it set itself."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "allreduce_bench"
ARCHITECTURE = ROOT / "doc" / "architecture.md"
MAX_FUNCTION_LINES = 60
TOP = {"allreduce_bench", "allreduce_bench.__main__", "allreduce_bench.cli"}  # the assembly


def core_order(text: str | None = None) -> list[list[str]]:
    """The tiers of the core's folder-order line, left to right."""
    text = ARCHITECTURE.read_text() if text is None else text
    line = re.search(r"<!-- core-order -->\s*`([^`]+)`", text).group(1)
    return [[name.strip() for name in tier.split(",")] for tier in line.split("->")]


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


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _is_module(dotted: str) -> bool:
    base = ROOT / dotted.replace(".", "/")
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, child.end_lineno + 1))
    return lines


def imports(path: Path) -> set[str]:
    """Every allreduce_bench module `path` imports, wherever the import statement is."""
    tree = ast.parse(path.read_text())
    types_only = _type_checking_lines(tree)
    found = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in types_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.startswith("allreduce_bench"):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if _is_module(candidate) else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("allreduce_bench")}
    return found


def graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    return {module_name(p): imports(p) - {module_name(p)} for p in package.rglob("*.py")}


def owner(module: str) -> str:
    """'core.<folder>' or 'core' (its pure modules) for the core, the feature's folder, or
    'top' for the package itself and the command group that assembles core and features."""
    if module in TOP:
        return "top"
    parts = module.split(".")
    if parts[1] == "core":
        return f"core.{parts[2]}" if len(parts) > 3 or _is_module(module + ".x") else "core"
    return parts[1]


def core_tier(module: str, tiers: list[list[str]]) -> int:
    parts = module.split(".")
    name = parts[2] if len(parts) > 2 else "__init__"
    if name in ("__init__", "__main__"):
        return -1
    for index, tier in enumerate(tiers):
        if name in tier:
            return index
    raise AssertionError(f"{module} is in no tier of doc/architecture.md's core order")


def against_the_shape(edges: dict[str, set[str]], text: str | None = None) -> list[str]:
    """Every import that breaks the shape: a feature importing an undeclared feature, the core
    importing any feature, a core folder importing one to its left."""
    tiers, table = core_order(text), features(text)
    found = []
    for module, targets in edges.items():
        if module in TOP or module == "allreduce_bench.core":
            continue
        mine = module.split(".")[1]
        for target in targets:
            theirs = target.split(".")[1] if target not in TOP else "top"
            if theirs == "top" and mine != "top":
                found.append(f"{module} -> {target} (the command group is imported by nobody)")
            elif mine == "core" and theirs != "core":
                found.append(f"{module} -> {target} (the core imports no feature)")
            elif mine == "core":
                here, there = core_tier(module, tiers), core_tier(target, tiers)
                same = len(module.split(".")) > 2 and len(target.split(".")) > 2 \
                    and module.split(".")[2] == target.split(".")[2]
                if there != -1 and not same and (there < here or (there == here and here != len(tiers) - 1)):
                    found.append(f"{module} -> {target} (against the core's order)")
            elif theirs not in ("core", mine) and theirs not in table.get(mine, set()):
                found.append(f"{module} -> {target} (not an edge of the features table)")
    return sorted(found)


def test_every_import_keeps_the_shape():
    against = against_the_shape(graph())
    assert not against, "imports against doc/architecture.md:\n" + "\n".join(against)


def test_a_core_module_importing_a_feature_fails_the_check():
    """The check itself: a core module that imports health, or a feature that imports one not
    in its row, is caught (the planted imports of the closing note)."""
    edges = graph()
    edges["allreduce_bench.core.measure.timing"] = edges["allreduce_bench.core.measure.timing"] | {
        "allreduce_bench.health.verdicts"}
    edges["allreduce_bench.links.summary"] = edges["allreduce_bench.links.summary"] | {
        "allreduce_bench.ddp.analysis"}
    edges["allreduce_bench.core.results.store"] = edges["allreduce_bench.core.results.store"] | {
        "allreduce_bench.core.analysis.tables"}
    assert against_the_shape(edges) == [
        "allreduce_bench.core.measure.timing -> allreduce_bench.health.verdicts (the core imports no feature)",
        "allreduce_bench.core.results.store -> allreduce_bench.core.analysis.tables (against the core's order)",
        "allreduce_bench.links.summary -> allreduce_bench.ddp.analysis (not an edge of the features table)",
    ]


def test_every_feature_folder_is_in_the_table_and_every_core_folder_in_the_order():
    table, tiers = features(), core_order()
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")} - {"core"}
    assert folders == set(table), folders ^ set(table)
    for edges in table.values():
        assert edges <= set(table), edges - set(table)
    core = {p.parent.name for p in (PACKAGE / "core").glob("*/__init__.py")} | {
        p.stem for p in (PACKAGE / "core").glob("*.py")} - {"__init__"}
    assert core == {name for tier in tiers for name in tier}, core ^ {n for t in tiers for n in t}


def test_no_feature_module_name_is_in_two_folders():
    """A feature's code in its own folder: no module outside it is named after it."""
    table = features()
    stray = [str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
             if p.stem in table and p.parent.name != p.stem]
    assert not stray, stray


def test_no_import_cycles():
    edges = graph()
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> None:
        if state.get(node) == "done":
            return
        assert state.get(node) != "open", "import cycle: " + " -> ".join(trail + [node])
        state[node] = "open"
        for child in sorted(edges.get(node, ())):
            if node.startswith(child + "."):
                continue  # a module of a package may use its package's __init__
            visit(child, trail + [node])
        state[node] = "done"

    for node in sorted(edges):
        visit(node, [])


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
