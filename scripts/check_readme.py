#!/usr/bin/env python
"""Run every line of the README's "One example per command" as a user would, in this checkout,
and print what each did: its exit code, its wall time, the claim its comment makes where one can
be counted, and whether `git status` stayed as it was (issue 37: no example edits the
repository). Figures printed, not a test; tests/test_docs.py checks the cheap part (every
example writes under a path git ignores) on every run of the suite.

Inputs a fresh clone does not have are made or taken from beside the checkout, one table below
(SUBSTITUTES): a published nccl-tests log (../shared/data/published-logs), NCCL Inspector
records of the committed example (tests/support/inspector_records.py), Flight Recorder dumps of
a world where one rank skips a collective (tests/hang/hang_ranks.py), a fresh default run for
`compare`'s second side. The torchrun line needs two nodes and is skipped; `sudo -E` is dropped
when already root (the emulate line needs root either way).

Usage: python scripts/check_readme.py [--only run,health,...]   (needs a clean `git status`)
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED = ROOT.parent / "shared" / "data" / "published-logs"
EXAMPLE = "results/example-cpu-gloo"
# exit codes each command documents for a healthy machine (compare: 1 = a regression found)
EXPECTED = {"health": {0, 3}, "compare": {0, 1}, "hang": {3}}


def examples(readme: Path) -> list[tuple[str, str]]:
    """(comment, command) of every command line in the block after '## One example per
    command', continuation lines joined."""
    text = readme.read_text()
    block = text.split("## One example per command", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    found, comment, pending = [], "", ""
    for line in block.splitlines():
        if line.startswith("#"):
            comment = line.lstrip("# ").strip() if not pending else comment
            continue
        if not line.strip():
            continue
        pending += line.rstrip("\\").rstrip() + " " if line.rstrip().endswith("\\") else line
        if not line.rstrip().endswith("\\"):
            found.append((comment, re.sub(r"\s+#.*$", "", pending).strip()))
            pending = ""
    return found


def substitutes(scratch: Path) -> dict[str, str]:
    """README placeholder -> a real input here (made on first use)."""
    sys.path[:0] = [str(ROOT / "tests" / "support"), str(ROOT / "tests" / "hang")]
    from hang_ranks import make_dumps
    from inspector_records import job_from_run

    logs = sorted(PUBLISHED.glob("10-allreduce-*.txt")) + sorted(PUBLISHED.glob("02-allreduce-*.txt"))
    if len(logs) < 2:
        sys.exit(f"check_readme: no published logs under {PUBLISHED}: put ../shared beside the checkout")
    make_dumps("skip", 3, 1, scratch / "dumps", timeout_s=1.0)
    job_from_run(ROOT / EXAMPLE, scratch / "nccl-inspector-1234", slower=1.5)
    new = scratch / "new"
    subprocess.run([sys.executable, "-m", "allreduce_bench", "run", "--quick", "--out", str(new)],
                   cwd=ROOT, check=True, capture_output=True)
    return {"all_reduce_perf.log": str(logs[0]), "nccl.*.log": str(logs[1]),
            "nccl-inspector-1234/": str(scratch / "nccl-inspector-1234"),
            "results/bench": EXAMPLE, "results/base": EXAMPLE, "results/new": str(new),
            "dumps/": str(scratch / "dumps")}


def claims(command: str, made: list[Path]) -> str:
    """What the README's comment claims that the run folders `made` can show, counted."""
    import pandas as pd

    said, runs = [], [p for p in made if (p / "results.csv").exists()]
    if "--algos all" in command and runs:
        rows = pd.read_csv(runs[0] / "results.csv")
        said.append("algorithms per world size " + ", ".join(
            f"N={n}: {k}" for n, k in rows.groupby("world_size")["algorithm"].nunique().items()))
    if "--collectives all" in command and runs:
        rows = pd.read_csv(runs[0] / "results.csv")
        said.append(f"{rows['collective'].nunique()} collectives, {len(rows)} rows")
    if " links " in f" {command} " or "allreduce,links" in command:
        drawn = any((p / "plots" / "links.png").exists() for p in made)
        said.append(f"links.png {'drawn' if drawn else 'MISSING'}")
    return "; ".join(said)


def folders() -> set[Path]:
    return {p for d in ("results", "plots") for p in (ROOT / d).glob("*")}


def git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="commands to run, e.g. run,links (default: all)")
    options = parser.parse_args()
    only = set(filter(None, options.only.split(",")))
    if git_status():
        sys.exit("check_readme: `git status` is not clean; commit or stash first (the check is that it stays so)")
    made_before, status = folders(), git_status()
    scratch = Path(tempfile.mkdtemp(prefix="check-readme-"))
    table = substitutes(scratch)
    print(f"check_readme: {len(examples(ROOT / 'README.md'))} example lines; load {os.getloadavg()[0]:.2f}")
    for comment, line in examples(ROOT / "README.md"):
        for placeholder, real in table.items():  # whole words: results/bench, not results/bench-json
            line = re.sub(re.escape(placeholder) + r"(?![\w-])", lambda _: real, line)
        words = shlex.split(line.replace("&&", " && "))
        name = words[words.index("allreduce-bench") + 1] if "allreduce-bench" in words else words[0]
        if only and name not in only:
            continue
        if words[0] == "torchrun":
            print(f"- skipped (needs two nodes): {line}")
            continue
        if words[:2] == ["sudo", "-E"] and os.geteuid() == 0:
            line = line.replace("sudo -E ", "", 1)
        before, start = folders(), time.perf_counter()
        done = subprocess.run(line, shell=True, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
        ok = done.returncode in EXPECTED.get(name, {0})
        now = git_status()
        clean = "git status unchanged" if now == status else "GIT STATUS CHANGED:\n" + now
        print(f"- {'ok' if ok else 'FAILED'} exit {done.returncode}, {wall:.1f} s, {clean}: {line}")
        said = claims(line, sorted(folders() - before))
        if said:
            print(f"    counted: {said}   (README: {comment})")
        if not ok:
            print("    " + (done.stderr or done.stdout)[-600:].replace("\n", "\n    "))
    for path in folders() - made_before:
        shutil.rmtree(path, ignore_errors=True)  # the examples' own outputs (ignored by git)
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
