"""health.json: written whole after every round, so a coordinator that dies mid-check leaves what it
had; read back as a --baseline."""
from __future__ import annotations

import json
from pathlib import Path

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.results.store import write_json

HEALTH_FILE = "health.json"
HEALTH_SCHEMA_VERSION = 1


def write_health(out_dir: Path, document: dict) -> Path:
    path = Path(out_dir) / HEALTH_FILE
    write_json(path, {"schema_version": HEALTH_SCHEMA_VERSION, **document})
    return path


def read_health(run_dir: Path, option: str = "--baseline") -> dict:
    """An earlier run's health.json; anything else is one line saying what is wrong."""
    path = Path(run_dir) / HEALTH_FILE
    if not path.is_file():
        raise UsageError(f"{option} {run_dir}: no {HEALTH_FILE} there; give the output directory "
                         "of an earlier `allreduce-bench health` run")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError, OSError) as error:
        raise UsageError(f"{option} {path} cannot be read as JSON ({error}); give another run") from None
    if not isinstance(document, dict) or document.get("schema_version") != HEALTH_SCHEMA_VERSION:
        raise UsageError(f"{option} {path} is not a health.json of schema version "
                         f"{HEALTH_SCHEMA_VERSION}; run the check again to make a baseline")
    return document


def outcome(out_dir: Path, since: float = 0.0) -> int | None:
    """A health run's exit code once its writer has reported (`finished`, written after the
    summary) in a health.json newer than `since`; None before. emulate passes it on."""
    path = Path(out_dir) / HEALTH_FILE
    try:
        if path.stat().st_mtime < since:
            return None
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(document, dict) or "finished" not in document:
        return None
    return int(document.get("exit_code", 1)) if document.get("complete") else 1
