"""The package's layering: every import (inside functions too) goes right in the folder order of
doc/architecture.md, there are no import cycles, no
function is over 60 lines, and every imported name exists."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "allreduce_bench"
MAX_FUNCTION_LINES = 60
KNOWN_LONG: set[str] = set()  # none left: the issue-20 branch split interop's and the model command's


def folder_order() -> list[list[str]]:
    """The tiers of doc/architecture.md's folder-order line, left to right."""
    text = (ROOT / "doc" / "architecture.md").read_text()
    line = re.search(r"<!-- folder-order -->\s*`([^`]+)`", text).group(1)
    return [[name.strip() for name in tier.split(",")] for tier in line.split("->")]


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


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports(p) - {module_name(p)} for p in PACKAGE.rglob("*.py")}


def tier_of(module: str, tiers: list[list[str]]) -> int | None:
    parts = module.split(".")
    if len(parts) < 2 or parts[1] in ("__main__", "__init__"):
        return None  # the package itself, `python -m allreduce_bench`
    for index, tier in enumerate(tiers):
        if parts[1] in tier:
            return index
    raise AssertionError(f"{module} is in no tier of doc/architecture.md's folder order")


def test_every_import_goes_right_in_the_folder_order():
    tiers = folder_order()
    against = []
    for module, targets in graph().items():
        here = tier_of(module, tiers)
        if here is None:
            continue
        pure = here == len(tiers) - 1
        for target in targets:
            there = tier_of(target, tiers)
            if there is None or module.split(".")[1] == target.split(".")[1]:
                continue
            if there < here or (there == here and not pure):
                against.append(f"{module} -> {target}")
    assert not against, "imports against the folder order:\n" + "\n".join(sorted(against))


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
                if lines > MAX_FUNCTION_LINES and f"{path.name}:{node.name}" not in KNOWN_LONG:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, "functions over 60 lines:\n" + "\n".join(long)


def test_the_order_is_the_one_documented():
    tiers = folder_order()
    folders = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    pure = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    named = {name for tier in tiers for name in tier}
    assert folders | pure == named, (folders | pure) ^ named


def test_every_name_imported_from_the_package_exists():
    """A name moved between modules breaks only the path that imports it (a function-level import
    runs late): check every `from allreduce_bench.x import name`, wherever it is, statically."""
    import importlib

    missing = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "tests").glob("*.py"), *(ROOT / "scripts").glob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                    and node.module.startswith("allreduce_bench")):
                continue
            module = importlib.import_module(node.module)
            missing += [f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{alias.name}"
                        for alias in node.names
                        if not hasattr(module, alias.name) and not _is_module(f"{node.module}.{alias.name}")]
    assert not missing, "imported names that do not exist:\n" + "\n".join(missing)
