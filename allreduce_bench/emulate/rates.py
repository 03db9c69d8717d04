"""The emulated link's rate in tc's own units, and the rate an emulated run resumes on."""
from __future__ import annotations

import re
from pathlib import Path

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.results.store import read_meta

TC_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
                 "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}


def parse_tc_rate(text: str) -> float:
    """'500mbit' -> 5e8 bits/s, with tc's units (mbit = megabit/s, mbps = megabyte/s)."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]+)\s*", text)
    unit = TC_RATE_UNITS.get(match.group(2).lower()) if match else None
    if match is None or not unit or not 0 < float(match.group(1)) * unit < 1e15:
        raise UsageError(f"--inter-bandwidth {text!r} is not a rate; write e.g. 500mbit, 2gbit or "
                         f"50mbps (tc units: {', '.join(TC_RATE_UNITS)}), or auto")
    return float(match.group(1)) * unit


def format_tc_rate(bits_per_s: float) -> str:
    return f"{bits_per_s / 1e9:.3g}Gbit" if bits_per_s >= 1e9 else f"{bits_per_s / 1e6:.3g}Mbit"


def resumed_dir(args: list[str]) -> Path | None:
    """The --resume DIR among the options passed on to `run`, if any."""
    for i, arg in enumerate(args):
        if arg == "--resume" and i + 1 < len(args):
            return Path(args[i + 1])
        if arg.startswith("--resume="):
            return Path(arg.split("=", 1)[1])
    return None


def same_emulation(resume_dir: Path, nodes: int, ranks_per_node: int, rate: float | None,
                   latency: float) -> float | None:
    """A resumed emulated run continues on the same links: refuse other ones; with auto, reuse
    the stored rate (a new measurement would differ a little and mix rows of two rates)."""
    stored = read_meta(resume_dir).get("emulation")
    if not isinstance(stored, dict):
        raise UsageError(f"--resume {resume_dir} is not an emulated run (its meta.json has no "
                         "emulation); continue it with `allreduce-bench run --resume` instead")
    was = (stored.get("nodes"), stored.get("ranks_per_node"), stored.get("inter_rate_bps"),
           stored.get("inter_latency_s", 0.0))
    now = (nodes, ranks_per_node, was[2] if rate is None else rate, latency)
    if was != now:
        raise UsageError(f"--resume {resume_dir} was emulated as {stored.get('label', was)}; give "
                         f"the same --nodes {was[0]} --ranks-per-node {was[1]} --inter-bandwidth "
                         f"{format_tc_rate(was[2] or 0).lower()} --inter-latency "
                         f"{(was[3] or 0) * 1e3:g}ms, or write to a new --out")
    return was[2]
