"""Where a run's ranks ran, from meta.json's `binding` (measure/binding.py)."""
from __future__ import annotations


def placement_lines(meta: dict) -> list[str]:
    """'N=2: ranks bound by core', one per world size; [] for runs from before --bind."""
    found = meta.get("binding") or {}
    return [f"N={n}: {found[n].get('summary', '?')}" for n in sorted(found, key=int)]


def placement_warnings(metas: dict[str, dict]) -> list[str]:
    """One line per run and world size whose ranks ran unbound or shared CPUs (doc/methodology.md)."""
    return [f"placement{f' of {run}' if run else ''}: {line}" for run, meta in metas.items()
            for line in placement_lines(meta) if "unbound" in line or "sharing CPUs" in line]
