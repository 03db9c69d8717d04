"""nccl-tests' text output (all_reduce_perf and friends), every generation since 2019.

gen1 `size count type redop time algbw busbw error` (error a max deviation like 5e-07, or N/A
with -c 0); gen2 a wider type column; gen3 `redop root ... #wrong`; gen4 `# Collective test
starting/concluded: <program>`; gen5 `# nccl-tests version`; 2.19+ `-I` per-iteration columns
`i_min i_max i_p99 i_cv%`. The header line names the columns, so rows are read by name and
every generation is one parser. A file may hold several runs: a new preamble or header after
rows starts the next one. Lines that are not nccl-tests' (NCCL INFO, MPI, shell) are skipped.
"""
from __future__ import annotations

import re

from allreduce_bench.interop.collectives import TYPES, collective_of_program, guess_collective
from allreduce_bench.interop.lines import ParseError, clean_lines
from allreduce_bench.interop.run import ImportedRun, nccl_version_of_code

TOOL = "nccl-tests"
_TIME_WORDS = ("time", "cputime")
_HALF_COLUMNS = {"time", "cputime", "algbw", "busbw", "error", "#wrong", "i_min", "i_max",
                 "i_p99", "i_cv%"}
_KEY_COLUMNS = {"size", "count", "type", "redop", "root"}
_RANK = re.compile(r"^Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)"
                   r"\s+\[([^\]]*)\]\s*(.*)$")
_SETTINGS = {
    "nthreads": r"nThread (\d+)", "ngpus": r"nGpus (\d+)", "min_bytes": r"minBytes (\d+)",
    "max_bytes": r"maxBytes (\d+)", "step": r"step: (\d+\((?:factor|bytes)\))",
    "warmup_iters": r"warmup iters: (\d+)", "iters": r"(?<![a-z] )iters: (\d+)",
    "agg_iters": r"agg iters: (\d+)", "validation": r"validation: (\d+)", "graph": r"graph: (\d+)",
    "unalign": r"unalign: (\d+)",
}
_TESTS_VERSION = re.compile(r"^nccl-tests version (\S+)(?: nccl-headers=(\d+))?(?: nccl-library=(\d+))?")
_NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+)(\S*)")
_PROGRAM = re.compile(r"^Collective test (starting|concluded): (\S+)")


def looks_like(text: str) -> bool:
    return bool(re.search(r"#\s*size\s+count\s+type", text)) or "# nThread" in text


def _number(text: str, source: str, line: int, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ParseError(source, line, f"{what} {text!r} is not a number") from None


class _Table:
    """The run being read: its preamble, its header and its rows."""

    def __init__(self, first_line: int):
        self.first_line = self.last_line = first_line
        self.settings: dict = {}
        self.meta: dict = {}
        self.ranks: list[dict] = []
        self.program: str | None = None
        self.key: list[str] = []
        self.half: list[str] = []
        self.timestamp = False
        self.header_line = 0
        self.rows: list[dict] = []

    def header(self, words: list[str], source: str, line: int) -> None:
        stamp = words[-1] == "timestamp"
        words = words[:-1] if stamp else words
        start = next((i for i, w in enumerate(words) if w in _TIME_WORDS), None)
        key, rest = words[:start], words[start:] if start is not None else []
        half = rest[: len(rest) // 2]
        if (start is None or not set(key) <= _KEY_COLUMNS or "size" not in key or len(rest) % 2
                or rest[len(half):] != half or not set(half) <= _HALF_COLUMNS
                or not {"algbw", "busbw"} <= set(half)):
            raise ParseError(source, line, "a table header this importer does not know: "
                             + " ".join(words))
        self.key, self.half, self.timestamp, self.header_line = key, half, stamp, line

    def row(self, tokens: list[str], source: str, line: int) -> None:
        expected = len(self.key) + 2 * len(self.half) + (2 if self.timestamp else 0)
        if len(tokens) != expected:
            raise ParseError(source, line, f"a table row with {len(tokens)} fields where the header "
                             f"at line {self.header_line} has {expected}")
        key = dict(zip(self.key, tokens))
        for name in ("size", "count"):
            if name in key and not key[name].isdigit():
                raise ParseError(source, line, f"{name} {key[name]!r} is not a whole number")
        type_name = key.get("type", "")
        dtype, _ = TYPES.get(type_name, (type_name, None))
        base = {"size_bytes": int(key["size"]), "count": int(key["count"]) if "count" in key else None,
                "type": type_name, "dtype": dtype, "redop": key.get("redop", ""),
                "root": int(key["root"]) if key.get("root", "").lstrip("-").isdigit() else None,
                "source_line": line}
        start = len(self.key)
        for in_place in (False, True):
            cells = dict(zip(self.half, tokens[start:start + len(self.half)]))
            start += len(self.half)
            self.rows.append({**base, **self._measurement(cells, source, line), "in_place": in_place})
        self.last_line = line

    def _measurement(self, cells: dict, source: str, line: int) -> dict:
        time_cell = cells.get("time", cells.get("cputime"))
        check = cells.get("#wrong", cells.get("error", ""))
        found = {
            "time_us_median": _number(time_cell, source, line, "time"),
            "algbw_GBps": _number(cells["algbw"], source, line, "algbw"),
            "busbw_GBps": _number(cells["busbw"], source, line, "busbw"),
            "time_printed": time_cell, "algbw_printed": cells["algbw"],
            "busbw_printed": cells["busbw"], "wrong_printed": check,
        }
        found["time_us_mean"] = found["time_us_median"]  # nccl-tests prints one time: a mean
        if check != "N/A" and check:
            value = _number(check, source, line, "#wrong" if "#wrong" in cells else "error")
            found["wrong"] = int(value) if "#wrong" in cells else None  # gen1: a max error, not a count
            if "error" in cells:
                found["max_error"] = value
        for column, name in (("i_min", "time_us_min"), ("i_max", "time_us_max"),
                             ("i_p99", "time_us_p99"), ("i_cv%", "time_cv_pct")):
            if column in cells:
                found[name] = _number(cells[column], source, line, column)
        return found


def _finish(table: _Table) -> ImportedRun:
    hosts = [r["host"] for r in table.ranks]
    world_size = len(table.ranks) or None
    collective = collective_of_program(table.program) if table.program else None
    why = f"named by '{table.program}'" if collective else ""
    if collective is None:
        element = {TYPES[r["type"]][1] for r in table.rows if r["type"] in TYPES}
        collective, why = guess_collective(
            table.rows[::2], element.pop() if len(element) == 1 else 1, world_size,
            has_redop="redop" in table.key and any(r["redop"] not in ("", "none") for r in table.rows),
            rooted=any(r["root"] not in (None, -1) for r in table.rows))
    meta = dict(table.meta)
    meta["settings"] = table.settings
    if table.program:
        meta["program"] = table.program
    if table.ranks:
        meta["devices"] = table.ranks
        meta["hostnames"] = hosts
        meta["device_names"] = [r["device_name"] for r in table.ranks]
    return ImportedRun(TOOL, collective, table.rows, meta, table.first_line, table.last_line,
                       world_size, why)


def parse(text: str, source: str) -> list[ImportedRun]:
    """Every run in a pasted nccl-tests log, in file order."""
    runs: list[ImportedRun] = []
    table: _Table | None = None
    nccl_version = None  # printed once per process, usually before the first table

    def fresh(line: int) -> _Table:
        nonlocal table
        if table is not None and table.rows:
            runs.append(_finish(table))
            table = None
        if table is None:
            table = _Table(line)
        return table

    for number, line in clean_lines(text):
        if line.startswith("#"):
            body = line.lstrip("#").strip()
            words = body.split()
            if match := _TESTS_VERSION.match(body):
                t = fresh(number)
                t.meta["nccl_tests_version"] = match.group(1)
                if match.group(3):
                    t.meta.setdefault("versions", {})["nccl"] = nccl_version_of_code(int(match.group(3)))
            elif match := _PROGRAM.match(body):
                if match.group(1) == "starting":
                    fresh(number).program = match.group(2)
                elif table is not None:
                    table.program = table.program or match.group(2)
                    table.last_line = number
            elif body.startswith("nThread"):
                t = fresh(number) if table is None or table.rows or table.settings else table
                for name, pattern in _SETTINGS.items():
                    if found := re.search(pattern, body):
                        value = found.group(1)
                        t.settings[name] = int(value) if value.isdigit() else value
            elif match := _RANK.match(body):
                rank, group, pid, host, device, bus, name = match.groups()
                t = table if table is not None and not table.rows else fresh(number)
                t.ranks.append({"rank": int(rank), "group": int(group) if group else None,
                                "pid": int(pid), "host": host, "device": int(device), "bus": bus,
                                "device_name": name.strip()})
            elif words[:2] == ["size", "count"]:
                t = table if table is not None and not table.rows else fresh(number)
                t.header(words, source, number)
            elif body.startswith("Avg bus bandwidth") and table is not None:
                table.meta["avg_busbw_GBps"] = float(body.split(":", 1)[1].split()[0])
                table.last_line = number
            elif body.startswith("Out of bounds values") and table is not None:
                table.meta["out_of_bounds"] = body.split(":", 1)[1].strip()
            continue
        if match := _NCCL_VERSION.search(line):
            nccl_version = match.group(1)
            continue
        tokens = line.split()
        if table is not None and table.half and tokens and tokens[0].isdigit() \
                and "avg_busbw_GBps" not in table.meta:
            table.row(tokens, source, number)
            if nccl_version:
                table.meta.setdefault("versions", {}).setdefault("nccl", nccl_version)
    if table is not None and table.rows:
        runs.append(_finish(table))
    return runs
