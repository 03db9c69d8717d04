"""What the machine's own noise did to a run's rows: those whose median cannot be trusted, and
those whose samples have a fast and a slow state."""
from __future__ import annotations

import math

import pandas as pd

from allreduce_bench.core.analysis.tables import label_runs
from allreduce_bench.core.metrics import CONFIDENCE, ROUNDS_ALPHA, ROUNDS_DISAGREE, TRUSTED_TO
from allreduce_bench.core.results.schema import allreduce_rows
from allreduce_bench.core.units import format_size

STEAL_NOTABLE = 0.02  # a share of CPU time the hypervisor took that shows in collective times
FEW_SAMPLES = 10  # below this the median's interval spans most of the samples
BUSY_BEFORE = 0.5  # load average per allowed CPU at the start: something else was running
# (read only where others_share is unknown: the load average trails by a minute)
OTHERS_NOTABLE = 0.10  # share of CPU time other processes took during the run
# what the flags mean: each table's note, and the page's list of flags (html.FLAGS)
UNSTABLE = (
    f"Rows whose median cannot be trusted to +-{100 * TRUSTED_TO:.0f}%: its "
    f"{100 * CONFIDENCE:.0f}% confidence interval (from the order statistics of the samples) "
    f"reaches further from it, or the interleaved rounds' medians spread by more than "
    f"{100 * ROUNDS_DISAGREE:.0f}% and their samples differ by more than their own spread explains "
    f"(Kruskal-Wallis p < {ROUNDS_ALPHA:g}: the machine changed between them). How much single "
    "samples vary does not decide it: on a machine whose calls switch between two states "
    "they always vary.")
TWO_STATES = (
    "Rows whose samples fell into a fast and a slow state (split at a gap of > 25% between "
    "neighbouring samples, each state >= 10% of them, their medians >= 1.5x apart): each "
    "state's median and share, beside the row's median, which lies in one of them or "
    "between. The fast state is the collective's own cost; the slow one is the machine "
    "getting in the way (a vCPU waking up, a descheduled rank).")


def flag(values: pd.Series) -> pd.Series:
    return values.astype("object").map(lambda v: str(v).lower() in ("true", "1"))


def unstable_rows(frame: pd.DataFrame) -> pd.DataFrame:
    rows = allreduce_rows(frame)
    if "unstable" not in rows.columns:
        return rows.iloc[0:0]
    return label_runs(rows[flag(rows["unstable"])])


def two_state_rows(frame: pd.DataFrame) -> pd.DataFrame:
    rows = allreduce_rows(frame)
    if "slow_share" not in rows.columns:
        return rows.iloc[0:0]
    return label_runs(rows[pd.to_numeric(rows["slow_share"], errors="coerce").notna()])


def why_unstable(row) -> str:
    """'interval' (the median's), 'rounds' (they disagree), or both, for one flagged row."""
    reasons = []
    median, low, high = (row.get(k) for k in ("time_us_median", "time_us_ci_low", "time_us_ci_high"))
    if all(isinstance(v, (int, float)) and v == v for v in (median, low, high)) and median > 0 \
            and max(median - low, high - median) > TRUSTED_TO * median:
        reasons.append("interval")
    spread, p = row.get("round_spread"), row.get("round_p")
    significant = not isinstance(p, (int, float)) or not p == p or p < ROUNDS_ALPHA  # older runs: no p
    if isinstance(spread, (int, float)) and spread > ROUNDS_DISAGREE and significant:
        reasons.append("rounds")
    return " and ".join(reasons) or "samples' spread (an older run)"


def _us(x: float) -> str:
    return "-" if not x == x else f"{x:.1f}"


def _pct(x: float) -> str:
    return "-" if not x == x else f"{100 * x:.0f}%"


def unstable_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per flagged row, indexed by (series, algorithm, world_size)."""
    flagged = unstable_rows(frame)
    if flagged.empty:
        return pd.DataFrame()
    get = lambda column: pd.to_numeric(flagged.get(column, pd.Series(math.nan, index=flagged.index)),  # noqa: E731
                                       errors="coerce")
    table = pd.DataFrame({
        "size": flagged["size_bytes"].map(format_size),
        "median (us)": get("time_us_median").map(_us),
        f"{100 * CONFIDENCE:.0f}% interval (us)": [f"{_us(a)}-{_us(b)}" for a, b in
                                                    zip(get("time_us_ci_low"), get("time_us_ci_high"))],
        "rounds spread": get("round_spread").map(_pct),
        "why": [why_unstable(row) for row in flagged.to_dict("records")]}, index=flagged.index)
    return table.set_index([flagged["series"], flagged["algorithm"], flagged["world_size"]])


def two_state_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per two-state row, indexed by (series, algorithm, world_size)."""
    rows = two_state_rows(frame)
    if rows.empty:
        return pd.DataFrame()
    number = lambda column: pd.to_numeric(rows[column], errors="coerce")  # noqa: E731
    table = pd.DataFrame({
        "size": rows["size_bytes"].map(format_size),
        "fast (us)": number("fast_us_median").map(_us), "fast share": number("fast_share").map(_pct),
        "slow (us)": number("slow_us_median").map(_us), "slow share": number("slow_share").map(_pct),
        "median (us)": number("time_us_median").map(_us),
        "unstable": flag(rows["unstable"]).map({True: "yes", False: "no"}) if "unstable" in rows
        else "-"}, index=rows.index)
    return table.set_index([rows["series"], rows["algorithm"], rows["world_size"]])
