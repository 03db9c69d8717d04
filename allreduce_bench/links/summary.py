"""The links benchmark's numbers: intra- vs inter-node busbw from rows alone."""
from __future__ import annotations


def links_summary(frame) -> str:
    """busbw intra vs inter per operation at the largest size: what the links figure shows."""
    frame = frame[frame["benchmark"] == "links"]
    lines = ["busbw (GB/s) intra vs inter:"]
    for operation, rows in frame.groupby("operation"):
        table = rows.pivot_table(index="size_bytes", columns="link", values="busbw_GBps",
                                 aggfunc="median")
        if {"intra", "inter"} <= set(table.columns):
            table["intra/inter"] = table["intra"] / table["inter"]
        lines.append(f"{operation}:\n{table.round(4).to_string()}")
    lines.append(f"#wrong in total: {int(frame['wrong'].sum())}")
    return "\n".join(lines)
