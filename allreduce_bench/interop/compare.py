"""Two runs (or folders of runs) size by size: the ratio of median times and, with raw samples
on both sides, whether it is more than noise (interop/significance.py); without, the ratio only."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.units import format_size
from allreduce_bench.interop import significance

KEY = ["benchmark", "algorithm", "world_size", "size_bytes", "link", "operation"]
COLUMNS = ["algorithm", "world_size", "size_bytes", "base_us", "other_us", "ratio", "ci_low",
           "ci_high", "significant", "p_value", "base_samples", "other_samples", "benchmark",
           "link", "operation", "verdict", "base_rounds", "other_rounds", "round_spread",
           "statistic", "base_loops", "other_loops"]
ROUND = ["source", "run_id", "round"]  # one round of one run: the unit the bootstrap draws
MIN_SAMPLES = 5
# Smallest change called significant (thousands of samples make tiny drifts "significant")
MIN_EFFECT = 0.03
# Sides whose loops differ by more than this factor compare means (medians differ on two-state hosts)
LOOPS_APART = 2.0


def parse_threshold(text: str) -> float:
    """'5%' -> 0.05, '0.05' -> 0.05; a bare number of 1 or more ('5') is refused: 5% or 500%?"""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(%?)\s*", str(text))
    if not match:
        raise UsageError(f"--fail-if-slower {text!r} is not a percentage; write e.g. 5%")
    value = float(match.group(1)) / (100.0 if match.group(2) else 1.0)
    if not match.group(2) and value >= 1:
        raise UsageError(f"--fail-if-slower {text!r} has no unit; write {text.strip()}% for "
                         f"{text.strip()} percent (a bare number is a fraction: 0.05 is 5%)")
    if not 0 <= value < 10:
        raise UsageError(f"--fail-if-slower {text!r} is out of range; write e.g. 5%")
    return value


def size_label(size_bytes) -> str:
    return format_size(size_bytes) if size_bytes else "0"


def _keyed(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    if "benchmark" not in frame.columns:
        frame["benchmark"] = "allreduce"
    frame["benchmark"] = frame["benchmark"].fillna("allreduce").astype(str)
    for column in ("link", "operation", "algorithm"):
        if column not in frame.columns:
            frame[column] = ""
        values = frame[column].astype("object")
        frame[column] = values.where(values.notna(), "").astype(str)
    frame["world_size"] = frame["world_size"].astype("int64")
    frame["size_bytes"] = frame["size_bytes"].astype("int64")
    return frame


def collective_times(samples: pd.DataFrame) -> pd.DataFrame:
    """One time per (key, round, sample): the slowest rank's (no `round`: one round per run)."""
    if samples.empty:
        return pd.DataFrame(columns=KEY + ROUND + ["time_us"])
    samples = _keyed(samples)
    for column, empty in (("source", ""), ("run_id", ""), ("round", 0)):
        if column not in samples.columns:
            samples[column] = empty
        samples[column] = samples[column].fillna(empty)
    by = KEY + ROUND + [c for c in ("measure", "sample") if c in samples.columns]
    return samples.groupby(by, dropna=False)["time_us"].max().reset_index()


def rounds_of(samples: pd.DataFrame) -> dict[tuple, list[list[np.ndarray]]]:
    """key -> its runs -> their rounds -> per-sample times (over every run given)."""
    found: dict[tuple, dict[tuple, list[np.ndarray]]] = {}
    for group_key, group in collective_times(samples).groupby(KEY + ROUND, sort=False)["time_us"]:
        runs = found.setdefault(tuple(group_key[:len(KEY)]), {})
        runs.setdefault(tuple(group_key[len(KEY):-1]), []).append(group.to_numpy(dtype=float))
    return {key: list(runs.values()) for key, runs in found.items()}


def loops_of(samples: pd.DataFrame) -> dict[tuple, float]:
    """key -> the median `loops` of its samples."""
    if samples.empty or "loops" not in samples.columns:
        return {}
    return _keyed(samples).groupby(KEY)["loops"].median().to_dict()


def ratio_only(ratio: float) -> str:
    if not ratio == ratio:
        return "no time"
    word = "slower" if ratio >= 1 else "faster"
    return f"{ratio if ratio >= 1 else 1 / ratio:.2f}x {word} (no samples: ratio only)"


def compare_runs(base_rows: pd.DataFrame, other_rows: pd.DataFrame, base_samples: pd.DataFrame,
                 other_samples: pd.DataFrame, confidence: float = 0.95,
                 min_effect: float = MIN_EFFECT, seed: int = 0) -> pd.DataFrame:
    base_rows, other_rows = _keyed(base_rows), _keyed(other_rows)
    base_rows = base_rows[base_rows["benchmark"] != "ddp"]
    medians = [rows.groupby(KEY)["time_us_median"].median() for rows in (base_rows, other_rows)]
    both = pd.concat(medians, axis=1, keys=["base_us", "other_us"], join="inner").dropna(how="all")
    if both.empty:
        raise UsageError("the runs share no (algorithm, world size, size) to compare; measure the "
                         "same sizes, or compare runs of the same benchmark")
    rounds = [rounds_of(s) for s in (base_samples, other_samples)]
    loops = [loops_of(s) for s in (base_samples, other_samples)]
    judging = Judging(confidence, min_effect, np.random.default_rng(seed))
    lines = [_line(key, row, (rounds[0].get(key, []), rounds[1].get(key, [])), judging,
                   (loops[0].get(key, np.nan), loops[1].get(key, np.nan)))
             for key, row in both.iterrows()]
    table = pd.DataFrame(lines)[COLUMNS]
    return table.sort_values(["benchmark", "algorithm", "world_size", "link", "operation",
                              "size_bytes"], ignore_index=True)


@dataclass(frozen=True)
class Judging:
    confidence: float
    min_effect: float
    rng: np.random.Generator


def _line(key, row, sides: tuple[significance.Side, significance.Side], judging: Judging,
          loops=(np.nan, np.nan)) -> dict:
    """One size: judged from the rounds' samples, or by the stored medians' ratio alone."""
    base, other = sides
    min_effect = judging.min_effect
    counts = [sum(len(r) for run in side for r in run) for side in (base, other)]
    line = {**dict(zip(KEY, key)), "base_samples": counts[0], "other_samples": counts[1],
            "base_rounds": sum(map(len, base)), "other_rounds": sum(map(len, other)),
            "base_loops": loops[0], "other_loops": loops[1], "statistic": "median"}
    if min(counts) < MIN_SAMPLES:
        ratio = row["other_us"] / row["base_us"] if row["base_us"] > 0 else float("nan")
        return {**line, "base_us": float(row["base_us"]), "other_us": float(row["other_us"]),
                "ratio": ratio, "ci_low": float("nan"), "ci_high": float("nan"),
                "significant": None, "p_value": float("nan"), "round_spread": float("nan"),
                "verdict": ratio_only(ratio)}
    apart = min(loops) > 0 and max(loops) / min(loops) > LOOPS_APART  # False with a NaN
    statistic = np.mean if apart else np.median
    j = significance.judge(base, other, judging.confidence, min_effect, judging.rng, statistic)
    verdict = significance.verdict(j, min_effect)
    if apart:
        verdict += (f"; means per call: samples of {loops[0]:g} and {loops[1]:g} calls, whose "
                    "medians differ where calls switch between states")
    return {**line, "base_us": significance.median_of(base, statistic),
            "other_us": significance.median_of(other, statistic), "ratio": j.ratio,
            "ci_low": j.ci_low, "ci_high": j.ci_high, "significant": j.significant,
            "p_value": j.p_value, "round_spread": j.spread, "verdict": verdict,
            "statistic": "mean" if apart else "median"}


def regressions(table: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Sizes whose ratio's whole interval is beyond 1 + `threshold` (a gate tests tens at once)."""
    return table[(table["significant"] == True) & (table["ci_low"] > 1 + threshold)]  # noqa: E712


def what(row) -> str:
    """'allreduce ring N=4 16M' (with the link and in-place half where a row has them)."""
    extra = [v for v in (getattr(row, "link", ""), getattr(row, "operation", "")) if v]
    return " ".join([str(row.benchmark), str(row.algorithm), f"N={row.world_size}", *extra,
                     size_label(row.size_bytes)])


def regression_lines(slower: pd.DataFrame) -> list[str]:
    return [f"  {what(r)}: {r.base_us:.1f} us -> {r.other_us:.1f} us ({r.statistic}), {r.ratio:.2f}x slower "
            f"[{r.ci_low:.2f}, {r.ci_high:.2f}]" for r in slower.itertuples()]


def same_runs(base_rows: pd.DataFrame, other_rows: pd.DataFrame) -> bool:
    """Whether two sides hold the same run ids: a run compared with itself or a copy."""
    ids = [set(rows["run_id"].dropna().astype(str)) if "run_id" in rows.columns else set()
           for rows in (base_rows, other_rows)]
    return bool(ids[0]) and ids[0] == ids[1]


STATISTIC_NOTE = ("  times: the median of each side's samples (over its rounds and runs), the "
                  "time_us_median the run's tables print")
MEAN_NOTE = ("  (mean): the sides' samples average very different numbers of calls (its line says how many), "
             "and where calls switch between a fast and a slow state their medians differ by that "
             "alone: those sizes compare the mean per call, which does not depend on it")


def format_table(table: pd.DataFrame) -> str:
    out = [STATISTIC_NOTE]
    for (benchmark, algorithm, world_size, link), group in table.groupby(
            ["benchmark", "algorithm", "world_size", "link"], sort=False):
        name = f"{algorithm}" + (f" {benchmark}" if benchmark != "allreduce" else "") + \
            (f" {link}" if link else "")
        out.append(f"  {name}, N={world_size}:")
        for r in group.itertuples():
            interval = f"  [{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.ci_low == r.ci_low else ""
            mark = " (mean)" if r.statistic == "mean" else ""
            out.append(f"    {size_label(r.size_bytes):>6}  {r.base_us:10.1f} us -> {r.other_us:10.1f} us{mark}"
                       f"  {r.verdict}{interval}")
    sampled = table["base_samples"].gt(0) & table["other_samples"].gt(0)
    if not sampled.all():
        out.append(f"  ({(~sampled).sum()} of {len(table)} sizes have no raw samples on both sides "
                   "(imported or older runs): compared by the ratio of stored medians only)")
    if sampled.any():
        rounds = table[sampled]
        out.append(f"  rounds per size: base {int(rounds['base_rounds'].median())}, other "
                   f"{int(rounds['other_rounds'].median())} (over all runs of a side; the bootstrap "
                   "draws runs, then rounds, then samples)")
    if table["statistic"].eq("mean").any():
        out.append(MEAN_NOTE)
    significant = table["significant"].fillna(False).astype(bool)
    out.append(f"  {int(significant.sum())} of {len(table)} sizes significantly different")
    return "\n".join(out)


def figure(table: pd.DataFrame):
    from allreduce_bench.core.analysis.style import MARKERS, plt, size_axis

    fig, ax = plt.subplots(figsize=(7, 4.2))
    curves = table.groupby([c for c in ("other", "benchmark", "algorithm", "world_size", "link")
                            if c in table.columns], sort=False)
    for i, (_, curve) in enumerate(curves):
        curve = curve[curve["size_bytes"] > 0].sort_values("size_bytes")
        if curve.empty:
            continue
        first = curve.iloc[0]
        label = " ".join(str(v) for v in (first["algorithm"], f"N={first['world_size']}", first["link"],
                                           "" if first["benchmark"] == "allreduce" else first["benchmark"]) if v)
        if "other" in table.columns and table["other"].nunique() > 1:
            label = f"{Path(str(first['other'])).name}: {label}"
        errors = None
        if curve["ci_low"].notna().any():
            errors = np.vstack([(curve["ratio"] - curve["ci_low"]).clip(lower=0),
                                (curve["ci_high"] - curve["ratio"]).clip(lower=0)]).astype(float)
            errors = np.nan_to_num(errors)
        ax.errorbar(curve["size_bytes"], curve["ratio"], yerr=errors, marker=MARKERS[i % 6],
                    capsize=3, label=label)
        hits = curve[curve["significant"] == True]  # noqa: E712
        ax.scatter(hits["size_bytes"], hits["ratio"], s=90, facecolors="none", edgecolors="red")
    ax.axhline(1.0, color="grey", linewidth=1)
    size_axis(ax)
    ax.set_ylabel("time ratio other / base (>1: slower)")
    ax.set_title("compare: ratio of median times (bars: confidence interval; red: significant)",
                 fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def write(table: pd.DataFrame, out_dir: Path, fmt: str = "png") -> tuple[Path, Path, str | None]:
    """compare.csv, the figure, and what an earlier compare.csv there compared (or None)."""
    from allreduce_bench.core.analysis.style import save

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "compare.csv"
    replaced = earlier_comparison(csv_path)
    table.to_csv(csv_path, index=False)
    return csv_path, save(figure(table), out_dir / f"compare.{fmt}"), replaced


def earlier_comparison(csv_path: Path) -> str | None:
    """'OTHER against BASE' of the compare.csv at csv_path, or None where there is none."""
    if not csv_path.exists():
        return None
    try:
        earlier = pd.read_csv(csv_path, usecols=["base", "other"])
    except (ValueError, OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        return "a file that is not a comparison"
    pairs = earlier.drop_duplicates()
    return "; ".join(f"{r.other} against {r.base}" for r in pairs.itertuples()) or "nothing"


def differing_settings(base_metas: list[dict], other_metas: list[dict], base_rows: pd.DataFrame,
                       other_rows: pd.DataFrame) -> list[str]:
    """'dtype: float32 -> bfloat16', 'versions.nccl: 2.18.3 -> 2.21.5', ... for settings that differ."""
    def settings(metas: list[dict], rows: pd.DataFrame) -> dict[str, str]:
        found: dict[str, set] = {}

        def add(name, value):
            if value not in (None, "", [], {}):
                found.setdefault(name, set()).add(str(value))
        for column in ("dtype", "backend", "device", "source_tool", "collective"):
            if column in rows.columns:
                for value in rows[column].dropna().unique():
                    add(column, value)
        for meta in metas:
            add("hosts", ",".join(sorted(dict.fromkeys(meta.get("hostnames") or []))))
            for name, value in (meta.get("versions") or {}).items():
                add(f"versions.{name}", value)
            add("device_name", meta.get("device_name") or ",".join(sorted(set(meta.get("device_names") or []))))
            add("cpu_model", meta.get("cpu_model"))
            config = meta.get("config") or {}
            for name in ("iters", "warmup", "timing"):
                add(name, config.get(name))
            environment = meta.get("environment")
            for name, value in (environment.items() if isinstance(environment, dict) else []):
                if name.startswith("NCCL_"):
                    add(name, value)
        return {k: ", ".join(sorted(v)) for k, v in found.items()}

    base, other = settings(base_metas, base_rows), settings(other_metas, other_rows)
    return [f"{name}: {base.get(name, '-')} -> {other.get(name, '-')}"
            for name in sorted(set(base) | set(other)) if base.get(name) != other.get(name)]
