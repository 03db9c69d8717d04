"""Hostile sweep: many bad (and some good) inputs across every command; counts clean / unclean.

Clean: exit 0, or exit 2 (1 for a fault the run reports) with at most two lines on stderr and no
traceback. Validation runs in-process with click's CliRunner; the measuring itself is replaced
by a stub (nothing starts) except for the few `--real` cases, which start real local worlds.

    python scripts/hostile_sweep.py [--real] [-v]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from unittest import mock

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from allreduce_bench.cli import main  # noqa: E402
from allreduce_bench.core.config import Sampling  # noqa: E402

BAD_NUMBERS = ["nan", "inf", "-inf", "1e400", "0", "-1", "", " ", "abc", "1.5", "0x10", "1e-400"]
BAD_SIZES = ["0", "-4K", "", "1T", "1P", "12XB", "4.5", "1e3", "nan", "9" * 40, "1,,2", ","]


def cases(tmp: Path) -> list[list[str]]:
    out = str(tmp / "o")
    afile = tmp / "afile"
    afile.write_text("x")
    run = ["run", "--world-sizes", "2", "--sizes", "4K", "--no-plot", "--out", out]
    c: list[list[str]] = []
    for v in BAD_NUMBERS:
        c += [["run", "--timeout", v, "--out", out], ["run", "--factor", v, "--out", out],
              ["run", "--iters", v, "--out", out], ["run", "--warmup", v, "--out", out],
              ["run", "--loops", v, "--out", out], ["run", "--samples", v, "--out", out],
              ["run", "--budget", v, "--out", out],
              ["run", "--ranks-per-node", v, "--out", out], ["run", "--world-sizes", v, "--out", out],
              ["ddp", "--params", v, "--out", out], ["ddp", "--bucket-mb", v, "--out", out],
              ["ddp", "--batch-size", v, "--out", out], ["ddp", "--timeout", v, "--out", out],
              ["ddp", "--accum", v, "--out", out], ["ddp", "--layers", v, "--out", out],
              ["model", "ddp", "--params", v, "--compute", "0.5s", "--bandwidth", "25GB/s"],
              ["model", "ddp", "--params", "7B", "--compute", v, "--bandwidth", "25GB/s"],
              ["model", "ddp", "--params", "7B", "--compute", "0.5s", "--bandwidth", v],
              ["model", "predict", "--world-size", v, "--intra-bw", "900GB/s"],
              ["model", "predict", "--world-size", "8", "--ranks-per-node", v, "--intra-bw", "1GB/s"],
              ["model", "predict", "--world-size", "8", "--intra-bw", v + "GB/s"],
              ["emulate", "--nodes", v], ["emulate", "--inter-ratio", v],
              ["emulate", "--inter-bandwidth", v]]
    for v in BAD_SIZES:
        c += [["run", "--sizes", v, "--out", out], ["run", "--min-bytes", v, "--out", out],
              ["run", "--max-bytes", v, "--out", out],
              ["model", "predict", "--world-size", "8", "--size", v, "--intra-bw", "900GB/s"],
              ["model", "fit", str(tmp / "good"), "--min-size", v]]
    for path in ["/proc/x", str(afile / "sub"), str(afile), "", "/dev/null/x", "/"]:
        c += [["run", "--out", path], ["ddp", "--out", path], ["links", "--ranks-per-node", "1",
              "--world-sizes", "2", "--out", path], ["report", str(tmp / "good"), "--out-dir", path],
              ["plot", str(tmp / "good"), "--out-dir", path],
              ["model", "fit", str(tmp / "good"), "--out", path],
              ["model", "ddp", "--params", "7B", "--compute", "0.5s", "--gpus", "8,16",
               "--intra-bw", "900GB/s", "--inter-bw", "25GB/s", "--plot", path + "/x.png"],
              ["run", "--resume", path]]
    c += [["run", "--tag", "x" * 300], ["run", "--tag", "a\nb", "--out", out],
          ["run", "--tag", "\udcff", "--out", out], ["run", "--world-sizes", "9999", "--out", out],
          ["run", "--world-sizes", "100000000000000000000", "--out", out],
          ["run", "--max-bytes", "1T", "--out", out], ["run", "--max-bytes", "64G", "--out", out],
          ["run", "--factor", "1.00001", "--out", out], ["run", "--algos", "", "--out", out],
          ["run", "--algos", "bogus", "--out", out], ["run", "--dtype", "float8", "--out", out],
          ["run", "--backend", "mpi", "--out", out], ["run", "--device", "tpu", "--out", out],
          ["run", "--sizes", "1M", "--min-bytes", "4K", "--out", out],
          ["ddp", "--params", "1T", "--out", out], ["ddp", "--params", "1.5", "--out", out],
          ["ddp", "--world-sizes", "9999", "--out", out], ["ddp", "--bucket-mb", "1,nan", "--out", out],
          ["links", "--out", out], ["links", "--ranks-per-node", "0", "--out", out],
          ["emulate", "--benchmarks", "bogus"], ["emulate", "--benchmarks", ""],
          ["emulate", "--ranks-per-node", "0"], ["emulate", "--inter-latency", "abc"],
          ["emulate", "--resume", str(tmp / "good")],
          ["model", "fit", str(tmp / "nothing")], ["model", "fit", str(afile)],
          ["model", "ddp", "--params", "7B", "--compute", "0.5s", "--gpus", "8,16,...,4",
           "--intra-bw", "1GB/s"],
          ["model", "predict", "--world-size", "8", "--model", str(afile)],
          ["model", "predict", "--world-size", "8", "--algo", "bogus", "--intra-bw", "1GB/s"],
          ["plot", str(tmp / "nothing")], ["report", str(afile)], ["bogus"], ["run", "--bogus"]]
    for name in CORRUPTIONS:
        d = tmp / f"corrupt-{name}"
        c += [["report", str(d), "--out-dir", str(tmp / "plots")],
              ["plot", str(d), "--out-dir", str(tmp / "plots")],
              ["model", "fit", str(d), "--no-plot", "--out", str(tmp / "m")],
              ["run", "--resume", str(d)]]
    c += [run + ["--out", str(tmp / "good")]]  # reuse a directory: a note, then the (stub) run
    return c


GOOD_ROWS = [
    "run_id,timestamp,tag,benchmark,algorithm,backend,device,dtype,world_size,nodes,ranks_per_node,"
    "size_bytes,count,iters,warmup,time_us_median,time_us_mean,time_us_p95,time_us_min,time_us_max,"
    "algbw_GBps,busbw_GBps,wrong"]
for _algo in ("native", "ring"):
    for _world in (2, 4):
        for _size in (4096, 65536, 1048576, 4194304):
            _t = 10 + _size / 1e3 * _world
            GOOD_ROWS.append(f"r1,2026-01-01T00:00:00,,allreduce,{_algo},gloo,cpu,float32,{_world},1,"
                             f"{_world},{_size},{_size // 4},5,1,{_t},{_t},{_t},{_t},{_t},"
                             f"{_size / _t / 1e3},{_size / _t / 1e3},0")
GOOD_CSV = "\n".join(GOOD_ROWS) + "\n"
GOOD_META = json.dumps({"run_id": "r1", "schema_version": 2,
                        "config": {"dtype": "float32", "sampling": asdict(Sampling()),
                                                   "backend": "gloo", "device": "cpu",
                                                   "ranks_per_node": None, "tag": ""}})

CORRUPTIONS = {
    "empty-meta": (GOOD_CSV, ""),
    "truncated-meta": (GOOD_CSV, GOOD_META[:20]),
    "list-meta": (GOOD_CSV, "[1, 2]"),
    "binary-meta": (GOOD_CSV, "\xff\xfe\x00garbage"),
    "non-numeric": (GOOD_CSV.replace(",0.409", ",abc", 1).replace(",4096,1024,", ",4K,1024,", 1),
                    GOOD_META),
    "garbage-line": (GOOD_CSV + "hello world\n", GOOD_META),
    "binary-line": (GOOD_CSV + "\x00\x01\x02\xff\xfe\n", GOOD_META),
    "torn-row": (GOOD_CSV + GOOD_ROWS[-1][:40], GOOD_META),
    "empty-csv": ("", GOOD_META),
    "header-only": (GOOD_ROWS[0] + "\n", GOOD_META),
    "foreign-csv": ("a,b,c\n1,2,3\n", GOOD_META),
    "ragged": (GOOD_CSV + "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26\n",
               GOOD_META),
    "ddp-run": (GOOD_CSV.replace(",allreduce,", ",ddp,"), json.dumps({**json.loads(GOOD_META),
                                                                      "ddp": {}})),
    "emulated-run": (GOOD_CSV, json.dumps({**json.loads(GOOD_META), "emulation": {"nodes": 2}})),
}


def write_stores(tmp: Path) -> None:
    (tmp / "good").mkdir()
    (tmp / "good" / "results.csv").write_text(GOOD_CSV)
    (tmp / "good" / "meta.json").write_text(GOOD_META)
    for name, (csv_text, meta) in CORRUPTIONS.items():
        d = tmp / f"corrupt-{name}"
        d.mkdir()
        (d / "results.csv").write_bytes(csv_text.encode("utf-8", "surrogateescape"))
        (d / "meta.json").write_bytes(meta.encode("latin-1", "replace"))


def clean(code: int, stderr: str) -> bool:
    lines = [line for line in stderr.splitlines() if line.strip()
             and not line.startswith("allreduce-bench: note:")]
    return (code == 0 or (code in (1, 2) and len(lines) <= 2)) and "Traceback" not in stderr


def stub(*args, **kwargs):
    return 0


def sweep(verbose: bool) -> tuple[int, int, list]:
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        write_stores(tmp)
        cwd = os.getcwd()
        os.chdir(tmp)  # default output directories land here
        unclean = []
        try:
            with mock.patch("allreduce_bench.core.launch.driver.drive", stub), \
                 mock.patch("allreduce_bench.emulate.session.check_can_emulate",
                            side_effect=SystemExit(0)):
                all_cases = cases(tmp)
                for args in all_cases:
                    result = runner.invoke(main, args, catch_exceptions=True)
                    code = result.exit_code
                    err = result.stderr
                    if result.exception and not isinstance(result.exception, SystemExit):
                        err += "Traceback (in-process): " + repr(result.exception)
                        code = 99
                    ok = clean(code, err)
                    if not ok:
                        unclean.append((args, code, err.strip()[-400:]))
                    if verbose:
                        print(("ok " if ok else "BAD"), code, args, "|", err.strip()[:200])
        finally:
            os.chdir(cwd)
    return len(all_cases), len(all_cases) - len(unclean), unclean


REAL = [
    # (description, argv, environment additions)
    ("stdout to /dev/full", ["model", "ddp", "--params", "7B", "--compute", "0.5s",
                             "--bandwidth", "25GB/s"], {}, "/dev/full"),
    ("non-numeric MASTER_PORT", ["run", "--quick", "--world-sizes", "2", "--no-plot"],
     {"MASTER_PORT": "abc"}, None),
    ("non-UTF-8 tag", ["run", "--quick", "--world-sizes", "2", "--tag", b"\xff".decode(
        "utf-8", "surrogateescape")], {}, None),
    ("a real quick run", ["run", "--quick", "--world-sizes", "2", "--no-plot"], {}, None),
]


# Ctrl-C (SIGINT to the whole process group, as a terminal sends it) this long after the start:
# while the CLI imports, while the ranks import torch, while they measure.
INTERRUPTS = [("run", 0.5), ("run", 1.0), ("run", 1.5), ("run", 2.0), ("run", 3.0), ("ddp", 1.5),
              ("ddp", 3.0), ("ddp", 6.0)]


def interrupt_cases(tmp: str) -> list:
    unclean = []
    for command, delay in INTERRUPTS:
        args = {"run": ["run", "--quick", "--world-sizes", "2", "--no-plot"],
                "ddp": ["ddp", "--world-sizes", "2", "--params", "1M", "--iters", "2",
                        "--no-plot"]}[command]
        proc = subprocess.Popen([sys.executable, "-m", "allreduce_bench", *args, "--out",
                                 f"{tmp}/int-{command}-{delay}"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, start_new_session=True,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
        time.sleep(delay)
        os.killpg(proc.pid, signal.SIGINT)
        err = proc.communicate(timeout=300)[1]
        # progress lines (ddp prints its measurements on stderr) are output, not complaints
        lines = [line for line in err.splitlines()
                 if line.startswith(("allreduce-bench", "emulate")) and "-> " not in line]
        ok = "Traceback" not in err and "KeyboardInterrupt" not in err and len(lines) <= 1
        print(f"real: Ctrl-C {command} after {delay} s: exit {proc.returncode}: {lines[-1:]}")
        if not ok:
            unclean.append((f"Ctrl-C {command} after {delay} s", proc.returncode, err[-400:]))
    return unclean


def real_cases() -> tuple[int, int, list]:
    unclean = []
    with tempfile.TemporaryDirectory() as t:
        for what, args, extra, stdout in REAL:
            env = {**os.environ, **extra, "PYTHONPATH": str(ROOT)}
            argv = [sys.executable, "-m", "allreduce_bench", *args, "--out", f"{t}/{len(unclean)}-{what[:4]}"] \
                if args[0] == "run" else [sys.executable, "-m", "allreduce_bench", *args]
            out = open(stdout, "w") if stdout else subprocess.DEVNULL
            done = subprocess.run([a.encode("utf-8", "surrogateescape") for a in argv], env=env,
                                  stdout=out, stderr=subprocess.PIPE, timeout=300)
            err = done.stderr.decode(errors="replace")
            print(f"real: {what}: exit {done.returncode}: {err.strip().splitlines()[-1:] }")
            if not clean(done.returncode, err):
                unclean.append((what, done.returncode, err[-400:]))
        unclean += interrupt_cases(t)
    tried = len(REAL) + len(INTERRUPTS)
    return tried, tried - len(unclean), unclean


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--real", action="store_true", help="also a few real runs (slow)")
    parser.add_argument("-v", "--verbose", action="store_true")
    opts = parser.parse_args()
    tried, ok, bad = sweep(opts.verbose)
    if opts.real:
        t2, ok2, bad2 = real_cases()
        tried, ok, bad = tried + t2, ok + ok2, bad + bad2
    for args, code, err in bad:
        print(f"UNCLEAN exit {code}: {args}\n    {err}")
    print(f"hostile sweep: tried {tried}, clean {ok}, unclean {tried - ok}")
