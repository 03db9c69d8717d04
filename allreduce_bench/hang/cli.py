"""`allreduce-bench hang DUMP...`: PyTorch Flight Recorder dumps, one per rank, read into a
verdict naming the rank that hung and the collective it hung on."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from allreduce_bench.core.errors import UsageError

HANG_FILE = "hang.json"


@click.command("hang", short_help="Which rank hung, and on what, from Flight Recorder dumps "
               "(exit 3 if one is named).")
@click.argument("dumps", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", type=click.Path(path_type=Path, file_okay=False),
              help=f"Write {HANG_FILE} here: `culprits` (rank, host, collective, seq, group, "
              "reason: never_entered, mismatch or no_dump; sizes, dtypes, stack), `missing_dumps` "
              "and per group its last collectives rank by rank.")
@click.option("--world-size", type=click.IntRange(min=1), help="Ranks the job had, when the "
              "dumps cannot say (no process group lists them): ranks without a dump are then named.")
def hang(dumps, out_dir, world_size):
    """Name the rank that hung a job, and the collective, from its Flight Recorder dumps.

    \b
    DUMPS: one file per rank as torch writes them (pickle from TORCH_FR_DUMP_TEMP_FILE or
    _dump_fr_trace(), or JSON from _dump_fr_trace_json()), named <prefix><rank> (rank0,
    nccl_trace_rank_3), or folders of them (a run's OUT/flight-recorder from
    --flight-recorder). Record them by running the job with TORCH_FR_BUFFER_SIZE=2000 (and,
    with NCCL, TORCH_NCCL_DUMP_ON_TIMEOUT=1 TORCH_FR_DUMP_TEMP_FILE=/shared/dir/rank).
    Per process group, the collectives are lined up by sequence number; at the first one
    where the members part ways it names each rank that never entered it (its dump ends
    before; or it came after the others' timeout), called something else (another op,
    sizes or dtypes than the majority: mismatch), or left no dump while every other member
    waits in it (no_dump), with host (from the dump or the run's meta.json), sizes, dtypes
    and the Python stack torch recorded.
    \b
    Exit codes: 3 a culprit named, 0 all ranks agree, 2 bad input.
    """
    from allreduce_bench.core.config.checks import check_writable_dir
    from allreduce_bench.core.results.store import write_json
    from allreduce_bench.core.text import wrapped
    from allreduce_bench.hang import dumps as flight_recorder
    from allreduce_bench.hang import verdict as analysis

    if out_dir is not None:
        check_writable_dir(out_dir, "--out")  # before reading: a bad --out is one line, exit 2
    found = flight_recorder.read(list(dumps))
    if not any(d.entries for d in found):
        raise UsageError(f"the {len(found)} dump(s) hold no collective: set TORCH_FR_BUFFER_SIZE "
                         "(TORCH_NCCL_TRACE_BUFFER_SIZE before torch 2.9) before the process group "
                         "is created; a torch whose Flight Recorder records NCCL only has no gloo entries")
    verdict = analysis.verdict(found, flight_recorder.hosts_beside(list(dumps)), world_size)
    click.echo(f"read {len(found)} dump(s) of ranks {analysis.ranges(verdict.dumped)} "
               f"(Flight Recorder {', '.join(sorted({d.version for d in found}))}); "
               f"{len(verdict.ranks)} rank(s) expected")
    click.echo(tables(verdict))
    click.echo(wrapped(analysis.summary(verdict)))
    if out_dir is not None:
        path = Path(out_dir) / HANG_FILE
        write_json(path, verdict.as_dict())
        click.echo(f"hang: {path}")
    sys.exit(verdict.exit_code)


def tables(verdict) -> str:
    """The last collectives of the groups that parted ways (else the culprits', else the first)."""
    from allreduce_bench.hang.verdict import group_label, ranges

    named = {c.group for c in verdict.culprits}
    shown = ([g for g in verdict.groups if g["parted_at"] is not None]
             or [g for g in verdict.groups if g["group"] in named] or verdict.groups[:1])
    lines = []
    for group in shown:
        lines.append(f"{group_label(group['group'], group['desc'])}, ranks {ranges(group['members'])}"
                     + (f", no dump from {ranges(group['no_dump'])}" if group["no_dump"] else ""))
        lines.append(f"  {'seq':>6}  {'collective':<40} {'entered':<12} {'completed':<12} never reached")
        # gloo's entries stay `scheduled`: no completion is recorded, so none is shown as none
        recorded = any(row["completed"] or set(row.get("state", ())) - {"scheduled"}
                       for row in group["collectives"])
        for row in group["collectives"]:
            mark = "  <- parted" if row["seq"] == group["parted_at"] else ""
            completed = ranges(row["completed"]) if recorded else "-"
            lines.append(f"  {row['seq']:>6}  {row['collective']:<40} {ranges(row['entered']):<12} "
                         f"{completed:<12} {ranges(row['never_reached'])}{mark}")
            for rank, call in sorted(row["other_call"].items(), key=lambda kv: int(kv[0])):
                lines.append(f"  {'':>6}  rank {rank} called {call}")
        if not recorded and group["collectives"]:
            lines.append("  completed -: the backend records no completion (gloo's entries stay `scheduled`; "
                         "NCCL's record it)")
    return "\n".join(lines)
