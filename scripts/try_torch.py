#!/usr/bin/env python
"""The torch releases setup.cfg claims, tried as a new user would (slow, not in CI: each
release's CUDA wheels are GBs): for each release, a throwaway venv (no system site-packages,
so nothing of this machine leaks in), that torch from PyPI with the NVIDIA libraries its wheel
pulls in, then `pip install -e REPO[test]`, then the fast tier under it. Prints one markdown
table row per release (doc/testing.md#torch-releases-tried keeps the last run's).

A release of two parts (2.4) means its latest patch (torch==2.4.*). Releases built against
NumPy 1.x get numpy<2 (torch <= 2.2: `.numpy()` and `from_numpy` fail under NumPy 2; 2.3's
wheels were the first built against NumPy 2.0, pytorch/builder#1770), and so pyarrow<26
(pyarrow 26 refuses NumPy 1.x at import but does not declare it); the notes under the table
say what was pinned.

Usage: python scripts/try_torch.py [--python PY] [--keep] [--work DIR] [RELEASE ...]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ["2.1", "2.4", "2.6", "2.14.1"]
FAST_TIER = ["-m", "pytest", "-q", "-m", "not slow", "-n", "2", "--dist", "loadfile",
             "-p", "no:cacheprovider"]
VERSIONS = "import sys, torch, numpy, pandas, scipy; print(sys.version.split()[0], torch.__version__, " \
           "numpy.__version__, pandas.__version__, scipy.__version__)"
COLUMNS = ["release", "python", "torch", "numpy", "pandas", "scipy", "install (s)", "passed", "failed",
           "skipped", "tier wall (s)", "first failure"]


def pins(release: str) -> list[str]:
    """What the release needs beside itself: NumPy 1.x for the wheels built against it."""
    major, minor = (int(part) for part in release.split(".")[:2])
    return ["numpy<2", "pyarrow<26"] if (major, minor) < (2, 3) else []


def requirement(release: str) -> str:
    return f"torch=={release}" if release.count(".") >= 2 else f"torch=={release}.*"


def step(cmd: list[str], log: Path, **kwargs) -> subprocess.CompletedProcess:
    """Runs cmd, appending its output to log; the output is returned too."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    except subprocess.TimeoutExpired as stopped:
        done = subprocess.CompletedProcess(cmd, 124, str(stopped.stdout or ""), f"timed out: {stopped}")
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n{done.stdout}{done.stderr}\n")
    return done


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1][:160] if lines else "(no output)"


def install(release: str, venv: Path, python: str, log: Path) -> str | None:
    """Makes the venv and installs torch, then the project; None, or why it failed."""
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    for cmd in ([python, "-m", "venv", str(venv)],
                [*pip, requirement(release), *pins(release)],
                [*pip, "-e", f"{ROOT}[test]", *pins(release)]):
        done = step(cmd, log)
        if done.returncode:
            return f"`{' '.join(cmd[-2:])}` failed: {last_line(done.stderr or done.stdout)}"
    return None


def clean_env(venv: Path) -> dict[str, str]:
    """This environment with the venv first on PATH and no path of this machine's Pythons."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["COLUMNS"] = "400"  # pytest cuts its FAILED lines, and so their reason, at the terminal's width
    return env


def tally(output: str) -> dict[str, str]:
    """pytest's closing counts and its first FAILED/ERROR line."""
    closing = next((line for line in reversed(output.splitlines()) if re.search(r" in [\d.]+s", line)), "")
    counts = {word: n for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", closing)}
    failed = int(counts.get("failed", 0)) + int(counts.get("error", 0)) + int(counts.get("errors", 0))
    first = next((line for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))), "")
    return {"passed": counts.get("passed", "0"), "failed": str(failed),
            "skipped": counts.get("skipped", "0"), "first failure": first[:200].replace("|", "\\|")}


def try_release(release: str, python: str, work: Path, keep: bool) -> dict[str, str]:
    venv, log = work / f"venv-{release}", work / f"torch-{release}.log"
    row = dict.fromkeys(COLUMNS, "")
    row["release"] = release
    started = time.monotonic()
    failure = install(release, venv, python, log)
    row["install (s)"] = f"{time.monotonic() - started:.0f}"
    if failure is None:
        env = clean_env(venv)
        versions = step([str(venv / "bin" / "python"), "-c", VERSIONS], log, env=env, cwd=work)
        if versions.returncode:
            failure = f"import failed: {last_line(versions.stderr)}"
        else:
            for name, value in zip(COLUMNS[1:6], versions.stdout.split()):
                row[name] = value
            started = time.monotonic()
            done = step([str(venv / "bin" / "python"), *FAST_TIER], log, env=env, cwd=ROOT, timeout=3600)
            row["tier wall (s)"] = f"{time.monotonic() - started:.0f}"
            row.update(tally(done.stdout + done.stderr))
    if failure is not None:
        row["first failure"] = failure.replace("|", "\\|")
    if not keep:
        shutil.rmtree(venv, ignore_errors=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("releases", nargs="*", default=DEFAULT, metavar="RELEASE",
                        help=f"torch releases, e.g. 2.4 (its latest patch) or 2.4.1 (default: {' '.join(DEFAULT)})")
    parser.add_argument("--python", default=sys.executable, help="the interpreter each venv is made from")
    parser.add_argument("--work", type=Path, help="where the venvs and logs go (default: a new folder in /tmp)")
    parser.add_argument("--keep", action="store_true", help="keep each venv after its run")
    args = parser.parse_args()
    bad = [r for r in args.releases if not re.fullmatch(r"2\.\d+(\.\d+)?", r)]
    if bad:
        print(f"try_torch: {bad[0]!r} is not a torch 2.x release such as 2.4 or 2.4.1", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="try-torch-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"logs in {work}; the fast tier: python {' '.join(FAST_TIER)}", flush=True)
    print("| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS), flush=True)
    for release in args.releases:
        row = try_release(release, args.python, work, args.keep)
        print("| " + " | ".join(row[c] for c in COLUMNS) + " |", flush=True)
    for release in args.releases:
        if pins(release):
            print(f"{release}: pinned {' '.join(pins(release))} (wheels built against NumPy 1.x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
