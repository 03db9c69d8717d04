"""DDP results read back from a DataFrame alone: overlap, the step-time model, accumulation (doc/ddp.md
defines them, per world size and bucket cap, on the slowest rank's medians)."""
from __future__ import annotations

import pandas as pd

from allreduce_bench.core.analysis.html_markdown import markdown_table
from allreduce_bench.core.analysis.terminal import terminal_table, wrapped
from allreduce_bench.ddp.timeline_store import TIMELINE_FILE, read_timeline
from allreduce_bench.model.step import step_time

# an AllReduce keeping a CPU busy this share of its time, nothing hidden, is CPU-bound (gloo vs backward)
CPU_BOUND = 0.4


def bucket_sizes(text) -> list[int]:
    """The `bucket_sizes` column ('1048576;26214400') back into bytes per bucket, ready order."""
    if not isinstance(text, str) or not text:
        return []
    return [int(v) for v in text.split(";")]


def overlappable_us(backward_us: float, comm_us: float, sizes: list[int]) -> float:
    """How much communication the backward pass can hide at most, by the first and last buckets' shares."""
    total = sum(sizes)
    if total <= 0:
        return 0.0
    window = backward_us * (1 - sizes[0] / total)
    hideable = comm_us * (1 - sizes[-1] / total)
    return max(0.0, min(window, hideable))


def predicted_step_us(compute_us: float, comm_us: float, overlappable: float) -> float:
    """The closed form compute + max(0, comm - overlappable), as the cost model computes it."""
    return step_time(compute_us, comm_us, 0.0, overlappable_s=overlappable).step_s


def pipelined_step_us(compute_us: float, backward_us: float, comm_us: float,
                      sizes: list[int], comm_cpu_us: float = 0.0) -> float:
    """The step as backward and DDP's buckets pipeline it; `comm_cpu_us`, what the AllReduce's CPU work costs
    a rank sharing its CPU with it (0 on GPU), lengthens backward by the buckets sent during it."""
    total = sum(sizes)
    if total <= 0:
        return compute_us + comm_us
    backward_us = backward_us + comm_cpu_us * (1 - sizes[-1] / total)
    compute_us = compute_us + comm_cpu_us * (1 - sizes[-1] / total)
    link_free, produced = 0.0, 0
    for size in sizes:
        produced += size
        ready = backward_us * produced / total
        link_free = max(link_free, ready) + comm_us * size / total
    return compute_us - backward_us + max(backward_us, link_free)


def ddp_rows(frame: pd.DataFrame) -> pd.DataFrame:
    if "benchmark" not in frame.columns:
        return frame.iloc[0:0]
    return frame[frame["benchmark"] == "ddp"]


def _median(rows: pd.DataFrame, measure: str, **match) -> pd.Series:
    """time_us_median of the rows of one measure whose columns equal `match`."""
    rows = rows[rows["measure"] == measure]
    for column, value in match.items():
        rows = rows[rows[column] == value]
    return rows["time_us_median"]


def overlap_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (world size, bucket cap): compute, comm, step, exposed, hidden, no-overlap and the model."""
    frame = ddp_rows(frame)
    out = []
    for world_size, rows in frame.groupby("world_size"):
        for bucket_mb, steps in rows[rows["measure"] == "step"].groupby("bucket_mb"):
            comm_rows = rows[(rows["measure"] == "comm") & (rows["bucket_mb"] == bucket_mb)]
            # compute is timed interleaved with each bucket cap's comm and step: use that one
            compute = _median(rows, "compute", bucket_mb=bucket_mb).median()
            backward = _median(rows, "backward", bucket_mb=bucket_mb).median()
            no_overlap = _median(rows, "no_overlap", bucket_mb=bucket_mb).median()
            on_cpu = "device" not in rows.columns or (rows["device"] == "cpu").all()
            comm_cpu = _median(rows, "comm_cpu", bucket_mb=bucket_mb).median() if on_cpu else 0.0
            comm_cpu = 0.0 if pd.isna(comm_cpu) else comm_cpu
            # the CPU seconds per second compute got: gloo's CPU time costs backward that over it
            cpu_rate = _median(rows, "compute_cpu", bucket_mb=bucket_mb).median() / compute
            cpu_rate = 1.0 if pd.isna(cpu_rate) or cpu_rate <= 0 else cpu_rate
            no_comm = _median(rows, "ddp_no_comm", bucket_mb=bucket_mb).median()
            ddp_cost = 0.0 if pd.isna(no_comm) else max(0.0, no_comm - compute)
            if comm_rows.empty or pd.isna(compute):
                continue
            step, comm = steps["time_us_median"].median(), comm_rows["time_us_median"].median()
            sizes = bucket_sizes(steps["bucket_sizes"].iloc[-1])
            exposed = step - compute
            raw = 1 - exposed / comm if comm > 0 else float("nan")
            share = min(1.0, max(0.0, raw))
            overlap = overlappable_us(backward, comm, sizes)
            predicted = pipelined_step_us(compute, backward, comm, sizes, comm_cpu / cpu_rate) + ddp_cost
            closed = predicted_step_us(compute, comm, overlap)
            out.append({
                "world_size": int(world_size), "bucket_mb": float(bucket_mb), "buckets": len(sizes),
                "compute_us": compute, "backward_us": backward, "comm_us": comm,
                "comm_cpu_us": comm_cpu, "cpu_rate": cpu_rate, "ddp_cost_us": ddp_cost, "step_us": step,
                "exposed_us": max(0.0, exposed), "hidden_us": share * comm,
                "hidden_share": share, "hidden_share_raw": raw, "clipped": raw != share,
                "cpu_bound": raw <= 0 and comm_cpu / cpu_rate >= CPU_BOUND * comm,
                "no_overlap_us": no_overlap,
                "speedup_vs_no_overlap": no_overlap / step if step > 0 else float("nan"),
                "overlappable_us": overlap, "predicted_us": predicted,
                "model_error": predicted / step - 1 if step > 0 else float("nan"),
                "closed_form_us": closed,
                "closed_form_error": closed / step - 1 if step > 0 else float("nan"),
                "wrong": int(steps["wrong"].sum()),
            })
    return pd.DataFrame(out)


def accumulation_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per world size: sync on every micro-batch against no_sync on all but the last."""
    frame = ddp_rows(frame)
    out = []
    for world_size, rows in frame.groupby("world_size"):
        sync = rows[rows["measure"] == "accum_sync"]
        nosync = rows[rows["measure"] == "accum_no_sync"]
        if sync.empty or nosync.empty:
            continue
        t_sync, t_nosync = sync["time_us_median"].median(), nosync["time_us_median"].median()
        out.append({
            "world_size": int(world_size), "accum": int(sync["accum"].iloc[-1]),
            "sync_us": t_sync, "no_sync_us": t_nosync,
            "sync_calls": int(sync["allreduce_calls"].iloc[-1]),
            "no_sync_calls": int(nosync["allreduce_calls"].iloc[-1]),
            "sync_bytes": int(sync["allreduce_bytes"].iloc[-1]),
            "no_sync_bytes": int(nosync["allreduce_bytes"].iloc[-1]),
            "saving": 1 - t_nosync / t_sync if t_sync > 0 else float("nan"),
        })
    return pd.DataFrame(out)


def _ms(us: float) -> str:
    return f"{us / 1e3:.1f}"


OVERLAP_HEADERS = ["world size", "bucket cap (MiB)", "buckets", "compute (ms)", "comm (ms)",
                   "comm CPU (ms)", "DDP step (ms)", "exposed (ms)", "hidden share",
                   "wait-then-AllReduce (ms)", "DDP vs wait-then-AllReduce", "predicted (ms)",
                   "model error", "compute + max(0, comm - overlap) (ms)"]


def _overlap_cells(r) -> list:
    share = "-" if r.cpu_bound else (
        f"{r.hidden_share:.0%}" + (f" (raw {r.hidden_share_raw:+.0%}, clipped)" if r.clipped else ""))
    baseline = "-" if pd.isna(r.no_overlap_us) else _ms(r.no_overlap_us)
    speedup = "-" if pd.isna(r.speedup_vs_no_overlap) else f"{r.speedup_vs_no_overlap:.2f}x"
    return [r.world_size, f"{r.bucket_mb:g}", r.buckets, _ms(r.compute_us), _ms(r.comm_us),
            _ms(r.comm_cpu_us), _ms(r.step_us), _ms(r.exposed_us), share, baseline, speedup,
            _ms(r.predicted_us), f"{r.model_error:+.0%}",
            f"{_ms(r.closed_form_us)} ({r.closed_form_error:+.0%})"]


def _overlap_frame(table: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame([_overlap_cells(r) for r in table.itertuples()], columns=OVERLAP_HEADERS)


def overlap_markdown(table: pd.DataFrame) -> str:
    return markdown_table(_overlap_frame(table), rule="---:")


def cpu_bound_line(table: pd.DataFrame) -> str | None:
    """One line in place of the hidden shares (shown as -) of the rows where gloo's AllReduce is CPU-bound."""
    bound = table[table["cpu_bound"]]
    if bound.empty:
        return None
    where = "; ".join(f"N={n}, bucket caps {', '.join(f'{c:g}' for c in rows['bucket_mb'])} MiB"
                      for n, rows in bound.groupby("world_size"))
    return (f"no overlap can show at {where}: gloo's AllReduce is CPU-bound there (CPU "
            f"{_ms(bound['comm_cpu_us'].min())}-{_ms(bound['comm_cpu_us'].max())} ms of its "
            f"{_ms(bound['comm_us'].min())}-{_ms(bound['comm_us'].max())} ms alone), so it takes the "
            "cores backward runs on instead of running behind it; a slower link (emulate "
            "--inter-bandwidth) or more cores per rank shows it.")


def clipped_notes(table: pd.DataFrame) -> list[str]:
    """Why each clipped hidden share is what it is, in the row's own numbers (CPU-bound rows: one line)."""
    notes = [line for line in [cpu_bound_line(table)] if line]
    for r in table[table["clipped"] & ~table["cpu_bound"]].itertuples():
        where = f"N={r.world_size}, bucket cap {r.bucket_mb:g} MiB"
        if r.hidden_share_raw < 0:
            notes.append(
                f"{where}: the DDP step took {_ms(r.exposed_us)} ms more than compute, more than "
                f"the {_ms(r.comm_us)} ms its AllReduce takes alone, so nothing was hidden (raw "
                f"share {r.hidden_share_raw:+.0%}, shown as 0%). Exposed counts all DDP adds: its "
                f"own bucket work ({_ms(r.ddp_cost_us)} ms: a DDP step that does not communicate, "
                f"less compute) and, on CPU, the AllReduce's {_ms(r.comm_cpu_us)} ms of CPU time "
                "taken from the cores backward runs on.")
        else:
            notes.append(f"{where}: the DDP step took less than compute timed apart (raw share "
                         f"{r.hidden_share_raw:+.0%}, shown as 100%): the two differ by noise.")
    return notes


def _accumulation_frame(table: pd.DataFrame) -> pd.DataFrame:
    headers = ["world size", "K", "sync every micro-batch (ms)", "no_sync (ms)",
               "AllReduce calls (sync / no_sync)", "bytes per optimizer step (sync / no_sync)",
               "saving"]
    return pd.DataFrame([
        [r.world_size, r.accum, _ms(r.sync_us), _ms(r.no_sync_us),
         f"{r.sync_calls} / {r.no_sync_calls}", f"{r.sync_bytes:,} / {r.no_sync_bytes:,}",
         f"{r.saving:.0%}"] for r in table.itertuples()], columns=headers)


def accumulation_markdown(table: pd.DataFrame) -> str:
    return markdown_table(_accumulation_frame(table), rule="---:")


def set_epoch_markdown(checks: list[dict]) -> str:
    lines = []
    for check in checks:
        without, with_ = check["without_set_epoch"], check["with_set_epoch"]
        lines.append(
            f"- world size {check['world_size']}, {check['dataset_len']} samples: without "
            f"`set_epoch` epochs 0 and 1 are {'identical' if without['epochs_identical'] else 'different'} "
            f"(rank 0: {without['rank0_epoch0']} then {without['rank0_epoch1']}); with "
            f"`set_epoch` they are {'identical' if with_['epochs_identical'] else 'different'} "
            f"(rank 0: {with_['rank0_epoch0']} then {with_['rank0_epoch1']}).")
    return "\n".join(lines)


# the console's columns of the two tables (report.md has them all): within a terminal's width
OVERLAP_CONSOLE = ["world size", "bucket cap (MiB)", "compute (ms)", "comm (ms)", "DDP step (ms)",
                   "hidden share", "DDP vs wait-then-AllReduce"]
ACCUMULATION_CONSOLE = ["world size", "K", "sync every micro-batch (ms)", "no_sync (ms)", "saving"]


def ddp_summary_text(frame: pd.DataFrame) -> str:
    """What the console shows after `ddp`: the two tables' main columns (report.md has every one)."""
    parts = []
    overlap = overlap_table(frame)
    if not overlap.empty:
        parts.append("Per bucket cap: compute, communication alone, DDP step (medians; every column in "
                     "report.md):\n" + terminal_table(_overlap_frame(overlap)[OVERLAP_CONSOLE])
                     + "".join(f"\n{wrapped(f'- {note}')}" for note in clipped_notes(overlap)))
    accum = accumulation_table(frame)
    if not accum.empty:
        parts.append("Gradient accumulation (DDP default buckets), time per optimizer step:\n"
                     + terminal_table(_accumulation_frame(accum)[ACCUMULATION_CONSOLE]))
    return "\n\n".join(parts)


def ddp_markdown(frame: pd.DataFrame, meta: dict | None = None, figures: dict | None = None) -> str:
    """The report's DDP section ("" without ddp rows); `figures`: figure name -> path as the report links it."""
    frame = ddp_rows(frame)
    if frame.empty:
        return ""
    meta = meta or {}
    settings = meta.get("ddp", {})
    figures = figures or {}
    out = ["## DDP in practice: bucketed overlap, no_sync, set_epoch", ""]
    if settings:
        out += [f"Synthetic model: {settings.get('params_actual', '?'):,} parameters in "
                f"{settings.get('layers', '?')} linear layers, batch {settings.get('batch_size', '?')} "
                f"per rank, {settings.get('iters', '?')} timed steps after "
                f"{settings.get('warmup', '?')} warm-up; backend {meta.get('backend', '?')} on "
                f"{meta.get('device_name', meta.get('device', '?'))}.", ""]
    if "overlap" in figures:  # seen first (report.html's first screen), explained below
        out += [f"![step time split]({figures['overlap']})", ""]
    out += ["Compute = the bare module's step (forward, backward, SGD step) with no communication; "
            "comm = AllReduce alone of buffers shaped like the buckets DDP sent (sizes read by a "
            "communication hook); exposed = step - compute; hidden share = 1 - exposed / comm, "
            "clipped to [0, 1]. Wait-then-AllReduce = backward to the end, one AllReduce of all "
            "gradients (flattened), then the SGD step, timed interleaved with the DDP step; DDP vs "
            "wait-then-AllReduce = its time / the DDP step's. Predicted = compute - backward + "
            "max(backward, when the last bucket is done), each bucket ready when backward has "
            "produced its bytes and sent after the one before it (the closed form compute + max(0, "
            "comm - overlappable) with the overlappable part worked out bucket by bucket), plus, "
            "on CPU, comm CPU time of the buckets sent during backward, and DDP's own cost "
            "(DDP step with a hook that does not communicate - compute); the "
            "closed form takes overlappable = min(backward x (1 - first bucket's share), "
            "comm x (1 - last bucket's share)).", ""]
    overlap = overlap_table(frame)
    if not overlap.empty:
        out += [overlap_markdown(overlap), ""]
        if overlap["clipped"].any():  # CPU-bound rows are clipped too
            out += ["Clipped shares: on shared CPU cores computation and communication slow "
                    "each other down instead of overlapping.", "",
                    *(f"- {note}" for note in clipped_notes(overlap)), ""]
    if "timeline" in figures:
        out += ["Measured timeline of one DDP step per bucket cap (the slowest rank's median "
                "step): the computation, and under it when each bucket's AllReduce was launched "
                "and completed (DDP communication hook), against the wait-then-AllReduce step; "
                f"every span is in `{TIMELINE_FILE}`.", "", f"![timeline]({figures['timeline']})", ""]
    accum = accumulation_table(frame)
    if not accum.empty:
        out += ["Gradient accumulation with DDP's default buckets (bucket_cap_mb unset: 25 MiB, "
                "the first one 1 MiB); AllReduce calls and bytes counted by the hook per "
                "optimizer step:", "", accumulation_markdown(accum), ""]
    if "accumulation" in figures:
        out += [f"![accumulation]({figures['accumulation']})", ""]
    checks = meta.get("set_epoch_check", [])
    if checks:
        out += ["`DistributedSampler` index order:", "", set_epoch_markdown(checks), ""]
    wrong = int(frame["wrong"].fillna(0).sum())
    out.append(f"Gradients after a DDP step against the hand-computed average: "
               f"{'all equal' if wrong == 0 else f'{wrong} element(s) differ'}.")
    return "\n".join(out) + "\n"


def timeline_of(frame: pd.DataFrame) -> pd.DataFrame:
    """The ddp_timeline rows of the runs the frame's ddp rows come from; empty when none was recorded."""
    frame = ddp_rows(frame)
    parts = []
    if "source" in frame.columns and "run_id" in frame.columns:
        for (source, run_id), _ in frame.groupby(["source", "run_id"]):
            parts.append(read_timeline(source, run_id))
    parts = [p for p in parts if not p.empty]
    return pd.concat(parts, ignore_index=True) if parts else read_timeline("/nonexistent")


def median_iteration(timeline: pd.DataFrame) -> pd.DataFrame:
    """Of one (world size, bucket cap, measure)'s iterations, the one with the median step."""
    steps = timeline.groupby("iteration")["step_us"].first().sort_values()
    return timeline[timeline["iteration"] == steps.index[(len(steps) - 1) // 2]]


def _union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def timeline_overlap(timeline: pd.DataFrame) -> pd.DataFrame:
    """Per (world size, bucket cap, measure), of the median iteration: how long some AllReduce was in flight
    and how much of that during backward."""
    out: list[dict] = []
    if timeline.empty:
        return pd.DataFrame(out)
    for (world_size, bucket_mb, measure), rows in timeline.groupby(["world_size", "bucket_mb", "measure"]):
        rows = median_iteration(rows)
        backward = rows[rows["span"] == "backward"].iloc[0]
        spans = _union(list(zip(rows.loc[rows["span"] == "allreduce", "start_us"],
                                rows.loc[rows["span"] == "allreduce", "end_us"])))
        busy = sum(b - a for a, b in spans)
        during = sum(max(0.0, min(b, backward["end_us"]) - max(a, backward["start_us"]))
                     for a, b in spans)
        out.append({"world_size": int(world_size), "bucket_mb": float(bucket_mb), "measure": measure,
                    "step_us": float(rows["step_us"].iloc[0]), "comm_busy_us": busy,
                    "during_backward_us": during,
                    "during_backward_share": during / busy if busy > 0 else float("nan")})
    return pd.DataFrame(out)
