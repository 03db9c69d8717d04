"""What rank 0 shows while measuring: a progress bar and nccl-tests style tables."""
from __future__ import annotations

import sys

from tqdm import tqdm

# time: median over samples of the slowest rank's time per call (p95, and p99 as nccl-tests -I's
# i_p99); rank-mean: what nccl-tests would print for the same calls; cv: spread over samples;
# samples x loops calls were timed.
HEADER = (
    f"#{'size':>11} {'count':>12} {'type':>9} {'time':>10} {'p95':>10} {'p99':>10} {'rank-mean':>10} "
    f"{'cv':>6} {'samples':>11} {'algbw':>8} {'busbw':>8} {'#wrong':>7}\n"
    f"#{'(B)':>11} {'(elements)':>12} {'':>9} {'(us)':>10} {'(us)':>10} {'(us)':>10} {'(us)':>10} "
    f"{'(%)':>6} {'x loops':>11} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7}"
)


def format_row(row: dict) -> str:
    counts = f"{row['samples']}x{row['loops']}"
    flag = "  unstable" if row.get("unstable") else ""
    return (f" {row['size_bytes']:>11} {row['count']:>12} {row['dtype']:>9} "
            f"{row['time_us_median']:>10.1f} {row['time_us_p95']:>10.1f} {row['time_us_p99']:>10.1f} "
            f"{row['time_us_rank_mean']:>10.1f} {100 * row['time_cv']:>6.1f} {counts:>11} "
            f"{row['algbw_GBps']:>8.3f} {row['busbw_GBps']:>8.3f} {row['wrong']:>7}{flag}")


class Console:
    """Progress over every (world size, algorithm, size) and a table per (algorithm, world size)."""

    def __init__(self, total: int, enabled: bool = True):
        self.enabled = enabled
        self.bar = tqdm(total=total, unit="size", file=sys.stderr, disable=None if enabled else True,
                        dynamic_ncols=True, leave=False)

    def algorithm(self, name: str, world) -> None:
        if self.enabled:
            self.bar.set_description(f"{name} N={world.size}")
            tqdm.write(f"\n# {name}: world size {world.size} ({world.nodes} node(s) x "
                       f"{world.ranks_per_node} ranks), {world.device.kind}\n{HEADER}")

    def row(self, row: dict) -> None:
        if self.enabled:
            tqdm.write(format_row(row))
            self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
