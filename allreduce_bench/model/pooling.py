"""Rows that may be fitted together: one backend, dtype and timing method (else they measure
different things, and a fit over them describes none; --pool overrides)."""
from __future__ import annotations

import pandas as pd

from allreduce_bench.core.errors import UsageError

POOLED_SETTINGS = {"backend": "backends", "dtype": "dtypes", "timing": "timing methods"}


def mixed_settings(frame: pd.DataFrame) -> dict[str, list[str]]:
    """setting -> its values, for each setting the rows disagree on."""
    mixed = {}
    for column in POOLED_SETTINGS:
        if column in frame.columns:
            values = sorted(frame[column].dropna().astype(str).unique())
            if len(values) > 1:
                mixed[column] = values
    return mixed


def check_poolable(frame: pd.DataFrame, pool: bool) -> None:
    mixed = mixed_settings(frame)
    if mixed and not pool:
        what = "; ".join(f"{POOLED_SETTINGS[c]} {', '.join(v)}" for c, v in mixed.items())
        raise UsageError(f"the rows mix {what}: a fit over them describes none; fit one setup at "
                         "a time (--tag selects rows, or give one run) or pass --pool to fit them "
                         "together anyway")
