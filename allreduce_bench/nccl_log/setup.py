"""The `nccl` block made readable, per host, and the hosts set up differently from the majority
("my job is slow: which host?"). Pure functions of the block."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd

from allreduce_bench.core.analysis.html_markdown import markdown_table
from allreduce_bench.core.analysis.terminal import terminal_table
from allreduce_bench.core.measure.binding import format_cpulist
from allreduce_bench.core.text import wrapped
from allreduce_bench.core.units import format_size

# what is compared across hosts: (key in the block's host entry, the word used for it)
COMPARED = (("nccl_version", "NCCL version"), ("network", "network"), ("nics", "NICs"),
            ("transports", "transports"), ("rank_count", "ranks"))
NOT_SET = "not set"


def _values(entry: dict) -> dict:
    return {"nccl_version": entry.get("nccl_version"), "network": entry.get("network"),
            "nics": tuple(entry.get("nics") or ()) or None,
            "transports": tuple(sorted(entry.get("transports") or {})) or None,
            "rank_count": len(entry["ranks"]) if entry.get("ranks") else None}


def _shown(value) -> str:
    if isinstance(value, tuple):
        return ", ".join(value) if value else "none"
    return NOT_SET if value is None else str(value)


def _sentence(what: str, host: str, value, majority, count: int, total: int) -> str:
    if majority is None:
        return f"{host}: {what} {_shown(value)}; the hosts disagree and no value is held by most"
    if what == "NICs" and isinstance(value, tuple) and isinstance(majority, tuple):
        missing = [n for n in majority if n not in value]
        return (f"{host}: {len(value)} NIC{'s' * (len(value) != 1)} ({_shown(value)}) where "
                f"{count} of {total} hosts have {len(majority)} ({_shown(majority)})"
                + (f"; missing {', '.join(missing)}" if missing else ""))
    return f"{host}: {what} {_shown(value)} where {count} of {total} hosts have {_shown(majority)}"


def _compare(values: dict[str, object], what: str, key: str) -> list[dict]:
    """One entry per host whose value is not the strict majority's (every host without one)."""
    if len(values) < 2 or len(set(values.values())) < 2:
        return []
    (top, count), = Counter(values.values()).most_common(1)
    majority = top if 2 * count > len(values) else None
    return [{"host": host, "what": key, "value": _plain(value), "majority": _plain(majority),
             "text": _sentence(what, host, value, majority, count, len(values))}
            for host, value in values.items() if majority is None or value != majority]


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def differences(block: dict) -> list[dict]:
    """Every (host, thing) that differs from what most hosts have (`majority` None on a split)."""
    hosts = {name: entry for name, entry in (block.get("hosts") or {}).items()
             if entry.get("ranks") or entry.get("network") or entry.get("transports")}
    found = []
    for key, what in COMPARED:
        known = {h: v[key] for h, v in ((h, _values(e)) for h, e in hosts.items()) if v[key] is not None}
        found += _compare(known, what, key)
    variables = sorted({v for entry in hosts.values() for v in entry.get("environment", {})})
    for variable in variables:
        values = {h: e.get("environment", {}).get(variable, NOT_SET) for h, e in hosts.items()}
        found += _compare(values, variable, f"environment {variable}")
    return found


def host_differences(block: dict | None, host: str) -> list[str]:
    """How `host`'s NCCL setup differs from the majority's: what `health` prints by a slow host."""
    if not block:
        return []
    return [d["text"] for d in differences(block) if d["host"] == host]


def host_table(block: dict) -> pd.DataFrame:
    rows = [{"host": name, "ranks": format_cpulist(entry.get("ranks") or []),
             "nccl_version": entry.get("nccl_version") or "",
             "network": entry.get("network") or "", "nic_count": len(entry.get("nics") or []),
             "nics": " ".join(entry.get("nics") or []),
             "transports": " ".join(f"{k}x{n}" for k, n in (entry.get("transports") or {}).items()),
             "environment": " ".join(f"{k}={v}" for k, v in (entry.get("environment") or {}).items()),
             "warnings": len(entry.get("warnings") or []), "lines": entry.get("lines", 0)}
            for name, entry in (block.get("hosts") or {}).items()]
    return pd.DataFrame(rows, columns=["host", "ranks", "nccl_version", "network", "nic_count", "nics",
                                       "transports", "environment", "warnings", "lines"])


def summary_line(block: dict) -> str:
    lines = block.get("lines", {})
    version = f"NCCL {block.get('nccl_version') or '(version not in the log)'}"
    if not lines.get("messages"):  # nccl-tests' banner names the version, no NCCL_DEBUG line ran
        return f"{version}: the version banner only, no NCCL INFO or WARN line (no host set-up to read)"
    hosts, ranks = len(block.get("hosts") or {}), block.get("world_size")
    return (f"{version}: {hosts} host(s)" + (f", {ranks} ranks" if ranks else " (its lines do not give the "
            "world size)") + f"; {lines.get('messages', 0)} NCCL lines read ({lines.get('info', 0)} INFO, "
            f"{lines.get('warn', 0)} WARN, {lines.get('unrecognized', 0)} of a kind not read)")


def _difference_lines(block: dict) -> list[str]:
    found = differences(block)
    if not found:
        hosts = len(block.get("hosts") or {})
        return ["No host differs from the others in NCCL version, network, NICs, transports, ranks "
                "or NCCL_* settings." if hosts > 1 else "One host: nothing to compare it with."
                if hosts else "The log names no host (NCCL's version banner only)."]
    return [f"- {d['text']}" for d in found]


def report_section(block: dict | None) -> str:
    """report.md's "What NCCL set up" section, or '' without a block."""
    if not block or not block.get("hosts"):
        return ""
    table = host_table(block).drop(columns=["lines"])
    parts = ["## What NCCL set up", "", summary_line(block) + ".", "",
             markdown_table(table)]
    parts += ["", "Hosts that differ from the majority:", "", *_difference_lines(block)]
    warnings = block.get("warnings") or []
    if warnings:
        parts += ["", f"NCCL WARN lines ({len(warnings)}):", ""]
        parts += [f"- {w['host']} ({w['at']}): {w['text']}" for w in warnings[:20]]
    return "\n".join(parts) + "\n"


def _tuning_lines(block: dict) -> list[str]:
    tuning = block.get("tuning") or []
    return [f"  {t['collective'] or 'collective'} {format_size(t['size_bytes'])}: {t['algorithm']}/"
            f"{t['protocol']}" + (f" on channels {t['channels']}" if t.get("channels") else "")
            for t in tuning[:40]] + ([f"  ... {len(tuning) - 40} more in nccl.json"] if len(tuning) > 40 else [])


def terminal_text(block: dict) -> str:
    """What `nccl-log` prints."""
    table = host_table(block).drop(columns=["lines"])
    table = table[[c for c in table.columns if c == "host" or (table[c].astype(str) != "").any()]]
    parts = [summary_line(block), "", terminal_table(table) if len(table) else "(no host named)",
             "", "Hosts that differ from the majority:", *(f"  {line.lstrip('- ')}" for line in
                                                           _difference_lines(block))]
    warnings = block.get("warnings") or []
    if warnings:
        parts += ["", f"NCCL WARN lines ({len(warnings)}):"]
        parts += [f"  {w['host']} {w['at']}: {w['text']}" for w in warnings[:20]]
    incomplete = block.get("incomplete_inits") or []
    if incomplete:
        parts += ["", f"{len(incomplete)} communicator init(s) started and never completed in the log "
                      "(a hang, or a log cut short): " + ", ".join(
                          f"rank {r['rank']} on {r['host']}" for r in incomplete[:10])]
    if block.get("tuning"):
        parts += ["", "Algorithm and protocol chosen per size (TUNING):", *_tuning_lines(block)]
    unread = block.get("unrecognized") or []
    if unread:
        parts += ["", f"{block['lines']['unrecognized']} NCCL line(s) of a kind not read, e.g.:"]
        parts += [f"  {u['at']}: {u['text'][:100]}" for u in unread[:5]]
    return wrapped("\n".join(parts))  # within a terminal's width, as the table


def write(block: dict, out_dir) -> tuple:
    """nccl.json (the block with its `differs`) and nccl_hosts.csv."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out_dir / "nccl.json", out_dir / "nccl_hosts.csv"
    json_path.write_text(json.dumps({**block, "differs": differences(block)}, indent=1) + "\n")
    host_table(block).to_csv(csv_path, index=False)
    return json_path, csv_path


def report_parts(metas: dict[str, dict]) -> list[str]:
    """report.md's "What NCCL set up" for every run with an `nccl` block, titled by run."""
    blocks = {run: meta["nccl"] for run, meta in metas.items() if meta.get("nccl")}
    parts = []
    for run, block in blocks.items():
        section = report_section(block)
        if section and len(blocks) > 1:
            section = section.replace("## What NCCL set up", f"## What NCCL set up: {run}", 1)
        parts += [section] if section else []
    return parts
