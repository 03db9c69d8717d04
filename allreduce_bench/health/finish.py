"""What `health` does once its ranks have ended: the summary, figure, report, kubectl.sh, Prometheus'
file and the exit code, from health.json."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from allreduce_bench.core.measure.context import Run
from allreduce_bench.health.benchmark import say
from allreduce_bench.health.config import HealthConfig
from allreduce_bench.health.ending import confirmed, release
from allreduce_bench.health.verdicts import INCOMPLETE


def finish_health(run: Run) -> int:
    from allreduce_bench.core.results.store import read_meta
    from allreduce_bench.health.hung import name_collectives
    from allreduce_bench.health.outputs import explain, summary
    from allreduce_bench.health.store import HEALTH_FILE, read_health, write_health

    config = run.config
    path = Path(config.launch.out_dir) / HEALTH_FILE
    if not path.exists():
        release(run)  # the ranks waiting to confirm
        say(f"allreduce-bench health: the check did not complete: no {path}")
        return INCOMPLETE
    meta = read_meta(config.launch.out_dir)
    doc = explain(read_health(config.launch.out_dir, "health"), meta.get("nccl"))
    doc = name_collectives(doc, config)  # --flight-recorder: on which collective
    said = _outputs(config, doc, meta)
    # every rank confirms it is still there, after the outputs: the hosts' state at the end
    if (ended := confirmed(run, doc)) is not doc:
        doc = ended
        _outputs(config, doc, meta)
    print(said, end="")
    print(f"health: {path}\n\n{summary(doc)}", flush=True)  # last: the ready --exclude
    write_health(config.launch.out_dir, {**doc, "finished": datetime.now(timezone.utc).isoformat(timespec="seconds")})
    if not doc.get("complete"):
        say("allreduce-bench health: the check did not complete; health.json holds the rounds measured")
        return INCOMPLETE
    return int(doc["exit_code"])


def _outputs(config: HealthConfig, doc: dict, meta: dict) -> str:
    """Writes the outputs from `doc`; returns the lines that say where."""
    from allreduce_bench.health.outputs import write_kubectl, write_prometheus

    said = f"kubectl: {write_kubectl(config.launch.out_dir, doc, meta)}\n"
    if config.settings.prometheus:
        write_prometheus(Path(config.settings.prometheus), doc)
        said += f"prometheus: {config.settings.prometheus}\n"
    if config.launch.plot:
        from allreduce_bench.health.plots import draw_health, report_section
        figure = draw_health(doc, Path(config.launch.out_dir) / "plots")
        report = Path(config.launch.out_dir) / "report.md"
        report.write_text(report_section(doc, figure, Path(config.launch.out_dir)))
        said += f"figure: {figure}\nreport: {report}\n"
    return said
