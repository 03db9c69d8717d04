"""What the suite's commands print, held to a 120-column terminal: this plugin (conftest.py loads
it) records the output of every command a test runs, in process (click's CliRunner) or as a
process (`python -m allreduce_bench`, `allreduce-bench`), and conftest.py fails a test whose
commands printed a wider line. The nccl-tests-style tables that `run`, `links` and `health`
print while measuring keep nccl-tests' columns: their lines may be as wide as their header, no
wider. One-line errors are left out (a message naming a user's path or value stays one line), and
a path counts as one column (its length is the user's, or pytest's temporary folder's)."""
from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from click.testing import CliRunner

from allreduce_bench.core.text import WIDTH

NCCL_TESTS_HEADER = re.compile(r"^#\s+(size|link)\s")  # its header; the table runs to a blank line
PATH = re.compile(r"(?<!\S)/[^\s:]+")  # an absolute path, up to a space or the colon after it
ERROR = "allreduce-bench: error: "
printed: list[str] = []  # the current test's command outputs


def too_wide(output: str) -> list[str]:
    """The lines past WIDTH but one-line errors; in an nccl-tests-style table, past its header."""
    found, header = [], 0  # the width of the table's header, 0 outside a table
    for line in output.splitlines():
        header = len(line) if NCCL_TESTS_HEADER.match(line) else header if line.strip() else 0
        if len(PATH.sub("/", line)) > max(WIDTH, header) and not line.startswith(ERROR):
            found.append(f"{len(line)}: {line[:80]}...")
    return found


def unwrapped(output: str) -> str:
    """`output` with the continuation lines that core/text.py's `wrapped` began joined back
    onto their line, so that a test reads each line whole."""
    return re.sub(r"\n {2,}", " ", output)


def _is_command(args) -> bool:
    """`python -m allreduce_bench ...` or `allreduce-bench ...`, as a list or a shell line."""
    words = [w for a in (args if isinstance(args, (list, tuple)) else [args])
             for w in (shlex.split(a) if isinstance(a, str) and " " in a else [str(a)])]
    return any(Path(w).name == "allreduce-bench" or (w == "allreduce_bench" and i and words[i - 1] == "-m")
               for i, w in enumerate(words))


def _text(output) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def pytest_configure(config):
    config.addinivalue_line("markers", "wide_console(why): a test whose command prints a line wider than "
                            "120 columns that another branch fixes (why says where); remove it once fixed")
    run, invoke = subprocess.run, CliRunner.invoke

    def recorded_run(*args, **kwargs):
        done = run(*args, **kwargs)
        if _is_command(args[0] if args else kwargs.get("args")):
            printed.extend((_text(done.stdout), _text(done.stderr)))
        return done

    def recorded_invoke(self, *args, **kwargs):
        result = invoke(self, *args, **kwargs)
        printed.append(result.output)
        return result

    subprocess.run, CliRunner.invoke = recorded_run, recorded_invoke
