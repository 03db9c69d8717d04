"""`allreduce-bench import`, `compare` and `export`."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click

from allreduce_bench.core.errors import UsageError


def _echo(text: str = "", err: bool = False) -> None:
    """click.echo within a terminal's width (core/analysis/terminal.py)."""
    from allreduce_bench.core.analysis.terminal import wrapped

    click.echo(wrapped(text), err=err)


def _unique_dir(out: Path, name: str, taken: set[str]) -> Path:
    candidate, k = name, 2
    while candidate in taken:
        candidate, k = f"{name}-{k}", k + 1
    taken.add(candidate)
    return out / candidate


@click.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Folder to write one run directory per imported table into.")
@click.option("--tag", default=None, help="Label for the imported rows. [the file's name]")
@click.option("--collective", default=None, help="Which collective the tables measured, when the "
              "log cannot say (e.g. all_reduce, reduce_scatter).")
@click.option("--world-size", type=int, default=None, help="Ranks, when the log neither prints them "
              "nor lets busbw/algbw tell.")
@click.option("--nodes", type=click.IntRange(min=1), default=None, help="Nodes, when the log does not "
              "name its hosts (for the verdict against published figures and the link limit).")
@click.option("--nics", default=None, help="NICs per node x Gb/s each, e.g. 8x200, which logs do not "
              "say (the link limit across nodes).")
def import_command(files, out_dir, tag, collective, world_size, nodes, nics):
    """Import nccl-tests, PARAM comms, all_reduce_bench.py or NCCL Inspector output as runs.

    \b
    FILES: nccl-tests text output (any generation, pasted with launcher prefixes, NCCL INFO
    lines, CRLF or indentation; several runs in one file, back to back or printed at once by
    several hosts, become several runs), nccl-tests -J JSON, PARAM comms logs (COMMS-RES
    lines), ml-engineering all_reduce_bench.py tables.
    Each table becomes OUT/<file>[-k]/ with results.csv, results.parquet and meta.json, which
    plot, report, model fit and compare read like any run (give them OUT or a run directory).
    NCCL's own debug lines in the file go into meta.json's `nccl` block (see `nccl-log`).
    Every result row is imported or listed as skipped with FILE:LINE and why; a file whose
    rows cannot be told apart is refused.
    NCCL Inspector's records of a real job (JSON Lines, <host>-pid<pid>.log, v4 records or
    flat ones, verbose or not, .gz too; a folder: every such file below it; a folder of
    nccl-tests -J files, as `export` writes, is read file by file): all given
    together are one job, one run of benchmark=job with a row per (collective, size,
    communicator size), its calls as samples; hold it against a benchmark run with
    `compare BENCH_RUN JOB_RUN`. A line cut short is skipped and counted.
    """
    from allreduce_bench import interop
    from allreduce_bench.expect.system import parse_nics
    from allreduce_bench.interop import inspector

    if world_size is not None and world_size < 1:
        raise UsageError(f"--world-size must be at least 1, got {world_size}")
    count, rate = parse_nics(nics)
    stated = {k: v for k, v in (("nodes", nodes), ("nics_per_node", count), ("nic_Gbps", rate)) if v}
    files = [f for path in files for f in _files_of(path, inspector)]
    for path in files:
        if path.suffix == ".prom":  # inspector_prom.cc writes per-bucket means, not calls
            raise UsageError(f"{path}: NCCL Inspector's Prometheus output holds a mean time and busbw per "
                             "message-size range (e.g. 2-3MB), not calls or sizes; import the JSON dumps "
                             "(NCCL_INSPECTOR_PROM_DUMP=0)")
    jobs = [path for path in files if inspector.looks_like(path)]
    job = inspector.read(jobs) if jobs else None
    parsed = [(path, interop.read_file(path)) for path in files if path not in jobs]  # all read first
    out_dir.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    if job is not None:
        _write_job(job, jobs, _unique_dir(out_dir, _job_name(jobs[0]), taken), tag)
    for path, runs in parsed:
        digest = interop.digest(path)
        for index, run in enumerate(runs):
            interop.settle(run, str(path), collective, world_size)
            name = path.stem if len(runs) == 1 else f"{path.stem}-{index + 1}"
            target = _unique_dir(out_dir, name, taken)
            if stated:
                run.meta["system"] = stated
            frame, samples = _write_run(run, path, target, tag if tag is not None else path.stem,
                                        interop.run_id_of(str(path), run, digest))
            _describe(path, run, frame, samples is not None, target)
            _verdict(target)


def _files_of(path: Path, inspector) -> list[Path]:
    """[path], or a folder's nccl-tests -J files where it holds no NCCL Inspector files."""
    if not path.is_dir() or inspector.looks_like(path):
        return [path]
    found = sorted(path.glob("*.json"))
    if not found:
        raise UsageError(f"{path} is a folder without NCCL Inspector files (*.log, *.jsonl[.gz]) or "
                         "nccl-tests -J files (*.json); give tool output files, or the folder "
                         "NCCL_INSPECTOR_DUMP_DIR names")
    return found


def _job_name(path: Path) -> str:
    return path.name if path.is_dir() else path.name.split(".")[0]


def _write_job(read, paths: list[Path], target: Path, tag: str | None) -> None:
    import uuid

    from allreduce_bench import interop
    from allreduce_bench.interop import job

    tag = tag if tag is not None else _job_name(paths[0])
    run_id = uuid.uuid5(uuid.NAMESPACE_URL, ":".join(interop.digest(f) for f in read.files)).hex
    frame = job.rows(read.frame, run_id, tag, ",".join(map(str, paths)))
    _write(target, frame, job.meta(read, run_id, tag, read.files), job.samples(read.frame, run_id))
    for line in job.describe(read, frame, target):
        _echo(line)


def _write_run(run, path: Path, target: Path, tag: str, run_id: str):
    from allreduce_bench import interop

    frame, samples = interop.run_frame(run, run_id, tag, str(path)), interop.samples_frame(run, run_id)
    _write(target, frame, interop.run_meta(run, run_id, tag, str(path)), samples)
    return frame, samples


def _write(target: Path, frame, meta: dict, samples) -> None:
    """One imported run's files; a re-import replaces all of them."""
    from allreduce_bench.core.results.store import SamplesWriter, write_meta, write_parquet

    target.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(target / "samples.parquet", ignore_errors=True)
    frame.to_csv(target / "results.csv", index=False)
    write_parquet(target, frame)
    write_meta(target, meta)
    if samples is not None:
        SamplesWriter(target).append(samples)


def _describe(path: Path, run, frame, with_samples: bool, target: Path) -> None:
    from allreduce_bench.nccl_log.setup import differences, summary_line

    halves = sorted({bool(v) for v in frame["in_place"]})
    what = " + ".join("in-place" if h else "out-of-place" for h in halves)
    _echo(f"{path}:{run.first_line}-{run.last_line}: {run.source_tool} {run.collective}, "
               f"{run.world_size} ranks, {len(frame) // max(1, len(halves))} rows "
               f"({frame['size_bytes'].nunique()} sizes; {what})"
               f"{' with per-iteration samples' if with_samples else ''} -> {target}")
    if run.why and not run.why.startswith("named"):
        _echo(f"  ({run.why})")
    for note in run.notes:
        _echo(f"  note: {note}")
    for line, why in run.skipped:
        _echo(f"  {path}:{line}: skipped: {why}")
    block = run.meta.get("nccl")
    if block:
        found = differences(block)
        hosts = len(block.get("hosts") or {})
        _echo(f"  {summary_line(block)}" + (f"; {len({d['host'] for d in found})} host(s) set up "
                   "differently from the others" if hosts > 1 else "")
                   + "".join(f"\n    {d['text']}" for d in found[:5]))


def _verdict(target: Path) -> None:
    from allreduce_bench.core.results.load import load_results
    from allreduce_bench.expect.verdict import summary_lines

    for line in summary_lines(load_results(target, explain_skips=False)):
        _echo(f"  {line}")


@click.command("compare")
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("others", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--out-dir", type=click.Path(path_type=Path, file_okay=False),
              help="Where compare.csv and the figure go. [compare-OTHER/ beside the first OTHER, not "
              "into a run read]")
@click.option("--fail-if-slower", default=None, help="Exit 1 when any size is significantly slower "
              "than BASE by more than this, e.g. 5% (a regression gate): the ratio's whole confidence "
              "interval beyond 1.05. A bare number is a fraction (0.05); 5 is refused.")
@click.option("--confidence", type=float, default=0.95, show_default=True,
              help="Confidence level of the intervals.")
@click.option("--format", "fmt", type=click.Choice(["png", "svg", "pdf"]), default="png",
              show_default=True, help="Figure file format.")
def compare_command(base, others, out_dir, fail_if_slower, confidence, fmt):
    """Compare runs against BASE size by size: ratio of median times, significance from rounds.

    \b
    BASE and each OTHER are a run directory or a folder of runs (all its runs are one side:
    pool several runs of a configuration for a regression gate). Rows are matched on
    (algorithm, world_size, size_bytes) (and collective and in-place for imported runs).
    With raw samples on both sides (samples.parquet) each size gets a confidence interval of
    the ratio of medians from a hierarchical bootstrap: runs, then their rounds (--rounds of
    `run`), then samples, so the variation between rounds and runs decides, not the far
    smaller one within a round. A side with one round gets a wide interval and says so; a
    size whose runs disagree with themselves more than the change says that. Runs without
    samples (imports, older runs) are compared by the ratio alone, and say so.
    Writes compare.csv and compare.<format> (ratio against size, with its interval) into
    --out-dir, by default compare-OTHER/ beside the first OTHER (never into a run read).
    A job's collectives (an `import` of NCCL Inspector records) against a benchmark run:
    `compare BENCH_RUN JOB_RUN` shows, size by size, the job's busbw as a share of the
    benchmark's at the same collective, world size and size (interpolated between measured
    sizes), and writes job_vs_benchmark.csv and .<format>: the benchmark's busbw curve with
    the job's calls over it.
    """
    from allreduce_bench.core.results.load import load_results, load_samples
    from allreduce_bench.core.results.store import read_meta
    from allreduce_bench.interop import compare as comparing

    if not 0.5 < confidence < 1:
        raise UsageError(f"--confidence must be between 0.5 and 1, e.g. 0.95; got {confidence}")
    threshold = comparing.parse_threshold(fail_if_slower) if fail_if_slower is not None else None
    base_rows = load_results(base, explain_skips=False)
    out_dir = out_dir or _beside(others[0])
    sides = [(other, load_results(other, explain_skips=False)) for other in others]
    if _compared_job(base, base_rows, sides, out_dir, fmt):
        return
    for other, other_rows in sides:  # every side read and checked before anything is written
        if comparing.same_runs(base_rows, other_rows):
            raise UsageError(f"{other} holds the same run(s) as {base} (run id "
                             f"{', '.join(sorted(set(base_rows['run_id'].astype(str))))}): a run compared with "
                             "itself says nothing; give the run to compare against another")
    failed = False
    tables = []
    for other, other_rows in sides:
        table = comparing.compare_runs(base_rows, other_rows, load_samples(base), load_samples(other),
                                       confidence=confidence)
        _echo(f"\n{other} against {base}:")
        for line in comparing.differing_settings(_metas(base, read_meta), _metas(other, read_meta),
                                                 base_rows, other_rows):
            _echo(f"  differs: {line}")
        _echo(comparing.format_table(table))
        table.insert(0, "other", str(other))
        table.insert(0, "base", str(base))
        tables.append(table)
        if threshold is not None:
            failed = _gate(table, threshold, base, other) or failed
    import pandas as pd
    table = pd.concat(tables, ignore_index=True)
    csv_path, figure, replaced = comparing.write(table, out_dir, fmt)
    _echo(f"\ncompare: {csv_path}" + (f" (replaces the earlier one there, which compared {replaced}; give "
                                     "--out-dir to keep both)" if replaced else "") + f"\nfigure: {figure}")
    if failed:
        sys.exit(1)


def _beside(other: Path) -> Path:
    """compare-<OTHER's name>/ beside the runs read, never inside one."""
    run = (other if other.is_dir() else other.parent).resolve()
    return run.parent / f"compare-{run.name}"


def _gate(table, threshold: float, base: Path, other: Path) -> bool:
    """--fail-if-slower: whether a size regressed, each said on a line of its own."""
    from allreduce_bench.interop import compare as comparing

    unjudged = int(table["significant"].isna().sum())
    if unjudged:
        _echo(f"note: --fail-if-slower cannot judge {unjudged} size(s) without raw samples on "
                   "both sides; they never fail the gate", err=True)
    slower = comparing.regressions(table, threshold)
    if len(slower):
        _echo("\n".join([f"REGRESSION: {len(slower)} size(s) of {other} significantly slower than "
                              f"{base} by more than {threshold:.0%}:", *comparing.regression_lines(slower)]),
                   err=True)
    return bool(len(slower))


def _compared_job(base: Path, base_rows, sides, out_dir: Path, fmt: str) -> bool:
    """The job view (interop/job_vs_benchmark.py) when one side is a job run."""
    from allreduce_bench.core.results.load import load_samples
    from allreduce_bench.interop import job_vs_benchmark as view

    jobs = [(other, rows) for other, rows in sides if view.is_job(rows)]
    if view.is_job(base_rows):
        if len(sides) != 1 or jobs:
            raise UsageError("give the benchmark run first and one job run after it: compare BENCH_RUN JOB_RUN")
        _echo(f"note: {base} is the job; comparing it against {sides[0][0]}")
        jobs, (base, base_rows) = [(base, base_rows)], sides[0]
    for job, job_rows in jobs:
        table = view.compare_job(base_rows, job_rows)
        _echo(f"\n{job} (a job's calls, NCCL Inspector) against the benchmark {base}:")
        _echo(view.format_table(table))
        csv_path, figure = view.write(table, base_rows, load_samples(job), out_dir, fmt)
        _echo(f"\njob vs benchmark: {csv_path}\nfigure: {figure}")
    return bool(jobs)


def _metas(path: Path, read_meta) -> list[dict]:
    from allreduce_bench.core.results.load import result_files
    return [read_meta(f.parent) for f in result_files(path)]


@click.command("export")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["nccl-tests-json"]), default="nccl-tests-json",
              show_default=True, help="nccl-tests-json: what nccl-tests 2.19's `-J FILE -I 1` writes "
              "(JSON version 3).")
@click.option("--out", "out_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="Folder for the files (one per collective, algorithm, world size and dtype).")
@click.option("--min-busbw", default=None, metavar="BANDWIDTH", help="Judge each file's "
              "average_bus_bandwidth as NCCL_TESTS_MIN_BW would (okay \"true\" when >= 90% of it); "
              "without it okay is \"unchecked\", as nccl-tests writes without the variable.")
@click.option("--force", is_flag=True, help="Write into a folder that is not empty: the nccl-tests "
              "files an earlier export left there go first; other files stay.")
def export_command(paths, fmt, out_dir, min_busbw, force):
    """Write a run as nccl-tests' JSON files, for the tools that read them.

    \b
    PATHS: run directories or folders of runs. One file per (collective, algorithm, world
    size, dtype), named <collective>_perf-<algorithm>-n<N>-<dtype>.json, holding every key
    nccl-tests 2.19's writer emits with -I 1, with its meanings: time = each rank's mean time
    per call averaged over ranks (nccl-tests' -a 1), algbw/busbw from it, per-iteration blocks
    from the raw samples (per_process_max_times_us: one list per rank; times_us: the max over
    ranks). AllReduce, Broadcast and Reduce run in place: their numbers are the in_place half
    (out_of_place is null, as nccl-tests writes a half it did not run; NVIDIA's
    tools/analyze_perf_json.py reads them with --in-place). `import` reads the files back.
    """
    from allreduce_bench.core.config.checks import parse_floor
    from allreduce_bench.core.results.load import load_results, load_samples
    from allreduce_bench.core.results.store import read_meta, replace_own
    from allreduce_bench.interop import export_nccl_tests as export

    floor = None if min_busbw is None else parse_floor(min_busbw)
    rows = load_results(paths, explain_skips=False)
    chosen = export.exportable(rows)
    if chosen.empty:
        raise UsageError(f"{', '.join(map(str, paths))} holds no collective rows to export (links, ddp, "
                         "health and job rows have no nccl-tests program); give a run of `run`")
    metas = {source: read_meta(Path(source)) for source in chosen["source"].unique()}
    found = export.documents(chosen, load_samples(paths), metas, floor)
    replace_own(out_dir, export.is_own, force, "--out", any_file=True)
    left = sorted(set(rows["benchmark"].astype(str)) - set(chosen["benchmark"].astype(str)))
    if left:
        _echo(f"note: {len(rows) - len(chosen)} rows of {', '.join(left)} are not collectives "
              "nccl-tests measures; not exported")
    for name, document in found:
        path = export.write(out_dir, name, document)
        _echo(f"{path}: {export.describe(document)}")
