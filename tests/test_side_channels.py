"""No in-process side channels (doc/architecture.md, "Configuration travels as parameters"): a
variable the package itself puts in an environment (its own, or one it builds for a child) is
read back only in core/environment.py, the one module that reads what a process was started
with. Elsewhere, what a function needs comes in as a parameter."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "allreduce_bench"
READER = PACKAGE / "core" / "environment.py"


def _is_environ(node: ast.AST) -> bool:
    """os.environ, or a parameter called environ standing for it."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or \
        (isinstance(node, ast.Name) and node.id == "environ")


def _constants(trees: dict[Path, ast.Module]) -> dict[str, str]:
    """Every module-level NAME = "TEXT" of the package, by name."""
    found = {}
    for tree in trees.values():
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                    and isinstance(node.value.value, str):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        found[target.id] = node.value.value
    return found


def _name(node: ast.AST | None, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def _keys(node: ast.AST, constants: dict[str, str]) -> set[str]:
    """The variable names a dict display or dict(..., NAME=...) call spells out."""
    if isinstance(node, ast.Dict):
        return {k for k in (_name(key, constants) for key in node.keys) if k}
    if isinstance(node, ast.Call):
        return {keyword.arg for keyword in node.keywords if keyword.arg} | {
            name for keyword in node.keywords if keyword.arg is None
            for name in _keys(keyword.value, constants)}
    return set()


def _fills_environment(function: ast.FunctionDef, constants: dict[str, str]) -> bool:
    """A function whose dicts are an environment: `*_environment` (its result is put in one),
    or one that sets os.environ[name] for a name it does not spell out."""
    if function.name.endswith("_environment"):
        return True
    for node in ast.walk(function):
        target = node.func.value if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
            and node.func.attr == "setdefault" and node.args else None
        if target is not None and _is_environ(target) and _name(node.args[0], constants) is None:
            return True
    return False


def set_and_read(tree: ast.Module, constants: dict[str, str]) -> tuple[set[str], list[tuple[int, str]]]:
    """(names this module puts in an environment, [(line, name) it reads from os.environ])."""
    sets, reads = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            name = _name(node.slice, constants)
            if name and isinstance(node.ctx, ast.Store):
                sets.add(name)
            elif name:
                reads.append((node.lineno, name))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, owner = node.func.attr, node.func.value
            first = _name(node.args[0], constants) if node.args else None
            if method in ("setdefault",) and _is_environ(owner) and first:
                sets.add(first)
            elif method == "update":
                sets |= _keys(node, constants) | (_keys(node.args[0], constants) if node.args else set())
            elif method in ("get", "pop") and _is_environ(owner) and first and method == "get":
                reads.append((node.lineno, first))
            elif method == "getenv" and first:
                reads.append((node.lineno, first))
        elif isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators) \
                and (name := _name(node.left, constants)):
            reads.append((node.lineno, name))
        elif isinstance(node, ast.Dict) and any(k is None and _is_environ(v)
                                                for k, v in zip(node.keys, node.values)):
            sets |= _keys(node, constants)  # {**os.environ, NAME: ...}: a child's environment
        elif isinstance(node, ast.FunctionDef) and _fills_environment(node, constants):
            for inner in ast.walk(node):  # the names it puts there come from its dicts
                if isinstance(inner, ast.Dict):
                    sets |= _keys(inner, constants)
    return sets, reads


def side_channels(package: Path = PACKAGE) -> list[str]:
    trees = {path: ast.parse(path.read_text()) for path in sorted(package.rglob("*.py"))}
    constants = _constants(trees)
    found = {path: set_and_read(tree, constants) for path, tree in trees.items()}
    ours = set().union(*(sets for sets, _ in found.values()))
    return [f"{path.relative_to(package.parent)}:{line} reads {name}, which the package sets itself"
            for path, (_, reads) in found.items() if path != READER
            for line, name in reads if name in ours]


def test_no_module_reads_a_variable_the_package_sets():
    assert side_channels() == []


def test_a_planted_side_channel_is_found(tmp_path):
    package = tmp_path / "allreduce_bench"
    (package / "core").mkdir(parents=True)
    (package / "core" / "environment.py").write_text('FLAG = "ALLREDUCE_BENCH_FLAG"\n')
    (package / "driver.py").write_text(
        "import os\nfrom allreduce_bench.core.environment import FLAG\n"
        "def start():\n    os.environ[FLAG] = '1'\n")
    (package / "rank.py").write_text(
        "import os\nfrom allreduce_bench.core.environment import FLAG\n"
        "def local():\n    return FLAG in os.environ\n")
    assert side_channels(package) == [
        "allreduce_bench/rank.py:4 reads ALLREDUCE_BENCH_FLAG, which the package sets itself"]


def environment_reads(package: Path = PACKAGE) -> list[str]:
    """Every read of this process's environment outside core/environment.py: a subscript, get,
    getenv, `in`, or the whole mapping iterated. Handing it on to a child ({**os.environ, ...},
    dict(os.environ)) and setting variables for torch or NCCL are not reads."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package) == READER.relative_to(PACKAGE):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            read = (isinstance(node, ast.Subscript) and _is_environ(node.value)
                    and isinstance(node.ctx, ast.Load)) or \
                (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                    node.func.attr == "getenv" or (node.func.attr in ("get", "items", "keys")
                                                   and _is_environ(node.func.value)))) or \
                (isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators))
            if read:
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return found


def test_only_core_environment_reads_the_environment(tmp_path):
    """What a launcher, torch, CUDA or the user set is read in one module (its small functions
    say what each variable means); a planted read elsewhere is found."""
    assert environment_reads() == []
    package = tmp_path / "allreduce_bench"
    (package / "core").mkdir(parents=True)
    (package / "core" / "environment.py").write_text("import os\nX = os.environ.get('X')\n")
    (package / "rank.py").write_text("import os\n\n\ndef agent():\n    return 'TORCHELASTIC_RUN_ID' in os.environ\n")
    assert environment_reads(package) == ["allreduce_bench/rank.py:5"]
