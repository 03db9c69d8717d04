"""Two runs size by size: the ratio of median times and whether it is more than noise.

Rows are matched on (benchmark, algorithm, world_size, size_bytes, link, operation): the
`benchmark` keeps an imported reduce_scatter or an in-place half apart from AllReduce rows.
With raw samples on both sides (samples.parquet; per sample the collective's time is the MAX
over ranks, as for the rows) each size gets a percentile-bootstrap interval of the ratio of
medians and a Mann-Whitney rank-sum test; it is called significant when the test rejects at
1 - confidence, the interval excludes 1, and the change is at least `min_effect` (run-to-run
drift between two runs of one configuration is of that order: a test on thousands of samples
would otherwise call every size "significant"). Without samples only the ratio is given.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from allreduce_bench.errors import UsageError
from allreduce_bench.units import format_size

KEY = ["benchmark", "algorithm", "world_size", "size_bytes", "link", "operation"]
COLUMNS = ["algorithm", "world_size", "size_bytes", "base_us", "other_us", "ratio", "ci_low",
           "ci_high", "significant", "p_value", "base_samples", "other_samples", "benchmark",
           "link", "operation", "verdict"]
MIN_SAMPLES = 5
BOOTSTRAP = 2000
MIN_EFFECT = 0.03


def parse_threshold(text: str) -> float:
    """'5%' -> 0.05, '0.05' -> 0.05."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*(%?)\s*", str(text))
    if not match:
        raise UsageError(f"--fail-if-slower {text!r} is not a percentage; write e.g. 5%")
    value = float(match.group(1)) / (100.0 if match.group(2) else 1.0)
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
    """One time per (key, run, sample): the slowest rank's, as an AllReduce ends with it."""
    if samples.empty:
        return pd.DataFrame(columns=KEY + ["time_us"])
    samples = _keyed(samples)
    by = KEY + [c for c in ("run_id", "measure", "sample") if c in samples.columns]
    return samples.groupby(by, dropna=False)["time_us"].max().reset_index()


def bootstrap_ratio(base: np.ndarray, other: np.ndarray, confidence: float,
                    rng: np.random.Generator) -> tuple[float, float]:
    """Percentile bootstrap interval of median(other) / median(base)."""
    base_medians = np.median(base[rng.integers(0, len(base), (BOOTSTRAP, len(base)))], axis=1)
    other_medians = np.median(other[rng.integers(0, len(other), (BOOTSTRAP, len(other)))], axis=1)
    ratios = other_medians / base_medians
    tail = (1 - confidence) / 2
    return float(np.quantile(ratios, tail)), float(np.quantile(ratios, 1 - tail))


def verdict(ratio: float, significant, has_samples: bool) -> str:
    if not ratio == ratio:
        return "no time"
    word = "slower" if ratio >= 1 else "faster"
    factor = ratio if ratio >= 1 else 1 / ratio
    if not has_samples:
        return f"{factor:.2f}x {word} (no samples: ratio only)"
    return f"{factor:.2f}x {word} ({'significant' if significant else 'not significant'})"


def compare_runs(base_rows: pd.DataFrame, other_rows: pd.DataFrame, base_samples: pd.DataFrame,
                 other_samples: pd.DataFrame, confidence: float = 0.95,
                 min_effect: float = MIN_EFFECT, seed: int = 0) -> pd.DataFrame:
    """One line per size both runs measured (see the module doc)."""
    from scipy.stats import mannwhitneyu

    base_rows, other_rows = _keyed(base_rows), _keyed(other_rows)
    base_rows = base_rows[base_rows["benchmark"] != "ddp"]
    medians = [rows.groupby(KEY)["time_us_median"].median() for rows in (base_rows, other_rows)]
    both = pd.concat(medians, axis=1, keys=["base_us", "other_us"], join="inner").dropna(how="all")
    if both.empty:
        raise UsageError("the runs share no (algorithm, world size, size) to compare; measure the "
                         "same sizes, or compare runs of the same benchmark")
    times = [collective_times(s).groupby(KEY)["time_us"].apply(np.asarray)
             for s in (base_samples, other_samples)]
    rng = np.random.default_rng(seed)
    lines = []
    for key, row in both.iterrows():
        base_t = times[0].get(key) if key in times[0].index else None
        other_t = times[1].get(key) if key in times[1].index else None
        sampled = (base_t is not None and other_t is not None
                   and len(base_t) >= MIN_SAMPLES and len(other_t) >= MIN_SAMPLES)
        line = dict(zip(KEY, key))
        if sampled:
            base_us, other_us = float(np.median(base_t)), float(np.median(other_t))
            ratio = other_us / base_us
            low, high = bootstrap_ratio(base_t, other_t, confidence, rng)
            p_value = float(mannwhitneyu(base_t, other_t, alternative="two-sided").pvalue)
            significant = bool(p_value < 1 - confidence and (low > 1 or high < 1)
                               and abs(ratio - 1) >= min_effect)
            line.update(base_samples=len(base_t), other_samples=len(other_t))
        else:
            base_us, other_us = float(row["base_us"]), float(row["other_us"])
            ratio = other_us / base_us if base_us > 0 else float("nan")
            low = high = p_value = float("nan")
            significant = None
            line.update(base_samples=0 if base_t is None else len(base_t),
                        other_samples=0 if other_t is None else len(other_t))
        line.update(base_us=base_us, other_us=other_us, ratio=ratio, ci_low=low, ci_high=high,
                    significant=significant, p_value=p_value,
                    verdict=verdict(ratio, significant, sampled))
        lines.append(line)
    table = pd.DataFrame(lines)[COLUMNS]
    return table.sort_values(["benchmark", "algorithm", "world_size", "link", "operation",
                              "size_bytes"], ignore_index=True)


def regressions(table: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Sizes significantly slower than the base by more than `threshold` (0.05 = 5%)."""
    return table[(table["significant"] == True) & (table["ratio"] > 1 + threshold)]  # noqa: E712


def format_table(table: pd.DataFrame) -> str:
    out = []
    for (benchmark, algorithm, world_size, link), group in table.groupby(
            ["benchmark", "algorithm", "world_size", "link"], sort=False):
        name = f"{algorithm}" + (f" {benchmark}" if benchmark != "allreduce" else "") + \
            (f" {link}" if link else "")
        out.append(f"  {name}, N={world_size}:")
        for r in group.itertuples():
            interval = f"  [{r.ci_low:.3f}, {r.ci_high:.3f}]" if r.ci_low == r.ci_low else ""
            out.append(f"    {size_label(r.size_bytes):>6}  {r.base_us:10.1f} us -> {r.other_us:10.1f} us"
                       f"  {r.verdict}{interval}")
    sampled = table["base_samples"].gt(0) & table["other_samples"].gt(0)
    if not sampled.all():
        out.append(f"  ({(~sampled).sum()} of {len(table)} sizes have no raw samples on both sides "
                   "(imported or older runs): compared by the ratio of stored medians only)")
    significant = table["significant"].fillna(False).astype(bool)
    out.append(f"  {int(significant.sum())} of {len(table)} sizes significantly different")
    return "\n".join(out)


def figure(table: pd.DataFrame):
    """Ratio of medians against size, one line per compared run and curve, with its interval."""
    from allreduce_bench.analysis.style import MARKERS, plt, size_axis

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


def write(table: pd.DataFrame, out_dir: Path, fmt: str = "png") -> tuple[Path, Path]:
    from allreduce_bench.analysis.style import save

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "compare.csv"
    table.to_csv(csv_path, index=False)
    return csv_path, save(figure(table), out_dir / f"compare.{fmt}")


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
