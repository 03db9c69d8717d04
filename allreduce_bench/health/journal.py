"""Each rank's events as JSON lines in <out>/health-ranks/, durable as it goes, so they outlive the rank
and the store: the verdict of a check whose ranks died is written from them (health/salvage.py)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

JOURNAL_DIR = "health-ranks"
CLAIM = "verdict-claimed"  # made by the survivor that writes the verdict (health/salvage.py)


class Journal:
    def __init__(self, out_dir, launched_rank: int, **joined):
        folder = Path(out_dir) / JOURNAL_DIR
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"rank-{launched_rank}.jsonl"
        self.path.unlink(missing_ok=True)  # an earlier run's, in the same folder
        if joined.get("world_rank") == 0:  # long before any survivor could claim this run's
            (folder / CLAIM).unlink(missing_ok=True)
        self.started = time.time()
        self.note("joined", rank=launched_rank, pid=os.getpid(), **joined)

    def note(self, event: str, **fields) -> None:
        line = json.dumps({"event": event, "t": round(time.time(), 3), **fields}) + "\n"
        try:
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(line)  # one write of a whole line: a reader never sees half of one
        except OSError:
            pass  # a full disk loses the journal, not the check


def read_journals(out_dir, since: float = 0.0) -> dict[int, list[dict]]:
    """Every rank's events (launched rank -> events in order), of journals written since `since`."""
    found: dict[int, list[dict]] = {}
    for path in (Path(out_dir) / JOURNAL_DIR).glob("rank-*.jsonl"):
        try:
            if path.stat().st_mtime < since:
                continue
            lines = path.read_text(encoding="utf-8").splitlines()
            found[int(path.stem.split("-")[1])] = [json.loads(line) for line in lines if line.endswith("}")]
        except (OSError, ValueError):
            continue
    return found
