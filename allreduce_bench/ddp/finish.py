"""What `ddp` does once its ranks have ended."""
from __future__ import annotations

from allreduce_bench.core.cli.finish import finish
from allreduce_bench.core.measure.context import Run
from allreduce_bench.ddp.sampler import SET_EPOCH_SAMPLES, set_epoch_check


def finish_ddp(run: Run) -> int:
    """The tables, the DistributedSampler check (here: it needs no world), figures; 1 if a gradient was wrong."""
    from allreduce_bench.core.results.store import update_meta
    from allreduce_bench.ddp.analysis import ddp_rows, ddp_summary_text, set_epoch_markdown

    checks = [set_epoch_check(SET_EPOCH_SAMPLES, k) for k in run.launch.world_sizes]
    update_meta(run.launch.out_dir, set_epoch_check=checks)

    def summarize(frame) -> str:
        return (ddp_summary_text(frame) + "\n\nDistributedSampler, epochs 0 and 1:\n"
                + set_epoch_markdown(checks))

    return finish(run, summarize, select=ddp_rows,
                  wrong_means="gradient element(s) after a DDP step differ from the "
                  "hand-computed average")
