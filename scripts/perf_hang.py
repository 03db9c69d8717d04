#!/usr/bin/env python3
"""How often `hang` names the right rank and collective: 4 fault kinds x N = 2, 4, 8 x 5 trials.

Each trial runs one real gloo world on loopback (tests/hang/hang_ranks.py) in which a random rank
hangs the third AllReduce: it sleeps past the timeout then calls it late (sleep), never calls it
(skip), calls it with another size (size), or dies before it without a dump (no_dump); the
others time out (or lose the connection) and dump torch's Flight Recorder. The dumps are read
(interop/flight_recorder.py) into a verdict (analysis/hang.py). Per cell it prints how many
trials named the culprit rank with the kind's reason on all_reduce #3, how many named no other
rank, and the seconds a trial took (world start, the timeout, the verdict).

    PYTHONPATH=$PWD python scripts/perf_hang.py [--trials 5] [--sizes 2,4,8] [--timeout 1]
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "hang"))

from hang_ranks import KINDS, make_dumps, named_correctly  # noqa: E402

from allreduce_bench.hang import dumps as flight_recorder  # noqa: E402
from allreduce_bench.hang.verdict import culprit_line, verdict  # noqa: E402


def trial(kind: str, n: int, culprit: int, folder: Path, timeout_s: float) -> tuple[bool, bool, float, str]:
    started = time.monotonic()
    make_dumps(kind, n, culprit, folder, timeout_s=timeout_s)
    found = verdict(flight_recorder.read([folder]), world_size=n)
    named, alone = named_correctly(found, kind, culprit)
    said = "; ".join(culprit_line(c) for c in found.culprits) or "no culprit"
    return named, alone, time.monotonic() - started, said


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--sizes", default="2,4,8")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--timeout", type=float, default=1.0, help="gloo's timeout, seconds")
    parser.add_argument("--seed", type=int, default=30)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{'kind':<8} {'N':>2}  {'named':>7}  {'alone':>7}  {'s/trial':>7}")
    total = wrong = 0
    with tempfile.TemporaryDirectory(prefix="perf-hang-") as scratch:
        for kind in args.kinds.split(","):
            for n in sizes:
                named = alone = 0
                seconds = []
                for t in range(args.trials):
                    culprit = rng.randrange(n)
                    ok, only, took, said = trial(kind, n, culprit, Path(scratch) / f"{kind}-{n}-{t}",
                                                 args.timeout)
                    named, alone, total = named + ok, alone + only, total + 1
                    seconds.append(took)
                    if not (ok and only):
                        wrong += 1
                        print(f"  miss: {kind} N={n} culprit {culprit}: {said}", flush=True)
                print(f"{kind:<8} {n:>2}  {named:>3}/{args.trials:<3}  {alone:>3}/{args.trials:<3}  "
                      f"{sum(seconds) / len(seconds):>7.1f}", flush=True)
    print(f"{total - wrong}/{total} trials named the culprit rank and collective and no other rank")
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
