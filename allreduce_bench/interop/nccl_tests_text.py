"""nccl-tests' text output, every generation since 2019: the header line names the columns, so
rows are read by name and every generation is one parser; a new preamble or header after rows
starts the next run, and lines that are not nccl-tests' (NCCL INFO, MPI, shell) are skipped."""
from __future__ import annotations

import re

from allreduce_bench.interop import interleaved
from allreduce_bench.interop.collective_names import TYPES, collective_of_program, guess_collective
from allreduce_bench.interop.lines import ParseError, clean_lines
from allreduce_bench.interop.run import ImportedRun, nccl_version_of_code
from allreduce_bench.nccl_log.lines import hosts_by_pid, read_lines, torn_text

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
_FOOTERS = ("Avg bus bandwidth", "Out of bounds values")


def looks_like(text: str) -> bool:
    return bool(re.search(r"#\s*size\s+count\s+type", text)) or "# nThread" in text


def _number(text: str, source: str, line: int, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ParseError(source, line, f"{what} {text!r} is not a number") from None


class _Table:
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
        self.has: set[str] = set()  # preamble and footer lines seen: version, program, ...

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

    @property
    def width(self) -> int:
        return len(self.key) + 2 * len(self.half) + (2 if self.timestamp else 0)

    def row(self, tokens: list[str], source: str, line: int) -> None:
        expected = self.width
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
        self.last_line = max(self.last_line, line)

    def _measurement(self, cells: dict, source: str, line: int) -> dict:
        time_cell = cells["time"] if "time" in cells else cells["cputime"]
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


def _finish(table: _Table, nccl_version: str | None = None) -> ImportedRun:
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
    if nccl_version:
        meta.setdefault("versions", {}).setdefault("nccl", nccl_version)
    if table.program:
        meta["program"] = table.program
    if table.ranks:
        meta.update(devices=table.ranks, hostnames=[r["host"] for r in table.ranks],
                    device_names=[r["device_name"] for r in table.ranks])
    return ImportedRun(TOOL, collective, table.rows, meta, table.first_line, table.last_line,
                       world_size, why)


class _Group:
    """Tables started together (several runs printing into one stream at once) and their rows."""

    def __init__(self):
        self.tables: list[_Table] = []
        self.rows: list[tuple[int, list[str]]] = []
        self.skipped: list[tuple[int, str]] = []

    def slot(self, kind: str, line: int, rank: int | None = None) -> _Table:
        """The first table that still lacks this preamble line, else a new one."""
        for table in self.tables:
            if (rank not in {r["rank"] for r in table.ranks} and not table.key) if kind == "rank" \
                    else kind not in table.has:
                return table
        self.tables.append(_Table(line))
        return self.tables[-1]

    def footer(self, kind: str) -> _Table | None:
        return next((t for t in self.tables if t.key and kind not in t.has), None)

    @property
    def ended(self) -> bool:
        headed = [t for t in self.tables if t.key]
        return bool(headed) and all("avg" in t.has for t in headed)


class _Reader:
    """nccl-tests text into groups of tables, torn rows put back together."""

    def __init__(self, source: str, known_hosts: dict):
        self.source, self.known = source, known_hosts
        self.groups: list[_Group] = []
        self.pending: tuple[int, list[str]] | None = None  # a row torn by NCCL's output
        self.nccl_version: str | None = None

    def group(self) -> _Group:
        if not self.groups or self.groups[-1].ended:
            self.groups.append(_Group())
        return self.groups[-1]

    def comment(self, number: int, body: str) -> None:
        words = body.split()
        if match := _TESTS_VERSION.match(body):
            table = self.group().slot("version", number)
            table.has.add("version")
            table.meta["nccl_tests_version"] = match.group(1)
            if match.group(3):
                table.meta.setdefault("versions", {})["nccl"] = nccl_version_of_code(int(match.group(3)))
        elif match := _PROGRAM.match(body):
            self._program(number, match.group(1), match.group(2))
        elif body.startswith("nThread"):
            table = self.group().slot("settings", number)
            table.has.add("settings")
            for name, pattern in _SETTINGS.items():
                if found := re.search(pattern, body):
                    table.settings[name] = int(found.group(1)) if found.group(1).isdigit() else found.group(1)
        elif match := _RANK.match(body):
            self._rank(number, match)
        elif words[:2] == ["size", "count"]:
            table = self.group().slot("header", number)
            table.has.add("header")
            table.header(words, self.source, number)
        elif body.startswith(_FOOTERS):
            self._footer(number, body)

    def _program(self, number: int, event: str, program: str) -> None:
        if event == "starting":
            table = self.group().slot("program", number)
            table.has.add("program")
            table.program = program
        elif self.groups and (ended := self.groups[-1].footer("concluded")) is not None:
            ended.has.add("concluded")
            ended.program = ended.program or program
            ended.last_line = number

    def _rank(self, number: int, match: re.Match) -> None:
        rank, group, pid, host, device, bus, name = match.groups()
        table = self.group().slot("rank", number, int(rank))
        table.ranks.append({"rank": int(rank), "group": int(group) if group else None, "pid": int(pid),
                            "host": host, "device": int(device), "bus": bus, "device_name": name.strip()})

    def _footer(self, number: int, body: str) -> None:
        kind = "avg" if body.startswith("Avg bus bandwidth") else "bounds"
        table = self.groups[-1].footer(kind) if self.groups else None
        if table is None:
            return
        table.has.add(kind)
        value = body.split(":", 1)[1].strip()
        if kind == "avg":
            table.meta["avg_busbw_GBps"] = float(value.split()[0])
            table.last_line = number
        else:
            table.meta["out_of_bounds"] = value

    def text(self, number: int, line: str) -> None:
        """A line that is not a `#` line: a row, a piece of a torn row, NCCL's or others' output."""
        torn = torn_text(line, self.known)
        if torn is None and (match := _NCCL_VERSION.search(line)):
            self.nccl_version = match.group(1)
            return
        tokens = (line if torn is None else torn).split()
        if self.pending is not None:
            if not tokens:
                return  # an NCCL line between two pieces of a row
            if self._extend(tokens):
                return
            start, held = self.pending
            self.skip(start, f"a result row torn by other output at line {number} and never "
                             f"completed ({len(held)} of {self._width()} fields)")
            self.pending = None
        if tokens and tokens[0].isdigit():
            if torn is None:
                self._row(number, tokens)
            else:
                self.pending = (number, [])
                if not self._extend(tokens):  # longer than a row, or no header yet
                    self.pending = None
                    self._row(number, tokens)

    def _extend(self, tokens: list[str]) -> bool:
        """Add a piece to the torn row (whole: it becomes a row); False when it cannot be one."""
        assert self.pending is not None
        start, held = self.pending
        width = self._width()
        if held and not all(_cell(t) for t in tokens) or len(held) + len(tokens) > width:
            return False
        held = held + tokens
        if len(held) >= width:
            self.pending = None
            self._row(start, held)
        else:
            self.pending = (start, held)
        return True

    def _width(self) -> int:
        headed = [t for t in self.groups[-1].tables if t.key] if self.groups else []
        return headed[0].width if headed else 0

    def _row(self, number: int, tokens: list[str]) -> None:
        group = self.groups[-1] if self.groups else None
        if group is None or not any(t.key for t in group.tables):
            self.skip(number, "a result row before any table header")
        elif group.ended:
            self.skip(number, "a result row after its table ended (# Avg bus bandwidth)")
        else:
            group.rows.append((number, tokens))

    def skip(self, number: int, why: str) -> None:
        if not self.groups:
            self.groups.append(_Group())
        self.groups[-1].skipped.append((number, why))

    def finish(self) -> None:
        if self.pending is not None:
            self.skip(self.pending[0], f"a result row cut off at the end of the file "
                                       f"({len(self.pending[1])} of {self._width()} fields)")
            self.pending = None


def _cell(token: str) -> bool:
    """A table cell: a number or N/A."""
    return token == "N/A" or re.fullmatch(r"-?\d+(?:\.\d*)?(?:e[-+]?\d+)?", token) is not None


def _place(group: _Group, source: str) -> None:
    """Give each row of the group to its table; refuse what fits none."""
    tables = [t for t in group.tables if t.key]
    runs = [interleaved.Run(t.width, t.settings.get("max_bytes")) for t in tables]
    rows = [interleaved.Row(line, _block(tables[0], tokens), int(tokens[0]), len(tokens))
            for line, tokens in group.rows]
    chosen, misfit = interleaved.assign(rows, runs)
    if misfit is not None:
        raise ParseError(source, misfit.line, f"{len(tables)} runs print into this stream at once "
                         f"and this row (size {misfit.size_bytes}) fits none of them (a run's sizes only "
                         "grow)", "import each run's output separately")
    for (line, tokens), index in zip(group.rows, chosen):
        tables[index].row(tokens, source, line)


def _block(table: _Table, tokens: list[str]) -> tuple:
    key = dict(zip(table.key, tokens))
    return key.get("type"), key.get("redop"), key.get("root")


def _note(runs: list[ImportedRun]) -> str | None:
    if len(runs) < 2:
        return None
    hosts = [sorted(set(r.meta.get("hostnames") or [])) for r in runs]
    sizes = sorted({r.world_size for r in runs if r.world_size})
    ranks = f"{sizes[0]} ranks" if len(sizes) == 1 else "ranks"
    if all(len(h) == 1 for h in hosts) and len({h[0] for h in hosts}) == len(hosts):
        return (f"{len(runs)} independent runs of {ranks}, one per host ({', '.join(h[0] for h in hosts)}), "
                "printed into one stream: a build without MPI started on several hosts? Each host "
                "measured alone; rows are given to the runs in the order they were printed (the "
                "output does not say which host printed which row)")
    return (f"{len(runs)} runs of {ranks} printed into one stream at once; rows are given to the "
            "runs in the order they were printed")


def parse(text: str, source: str) -> list[ImportedRun]:
    """Every run in a pasted nccl-tests log, rows that cannot be imported in their `skipped`."""
    reader = _Reader(source, hosts_by_pid(read_lines(text, source).messages))
    for number, line in clean_lines(text):
        if line.startswith("#"):
            reader.comment(number, line.lstrip("#").strip())
        else:
            reader.text(number, line)
    reader.finish()
    runs: list[ImportedRun] = []
    unplaced: list[tuple[int, str]] = []
    for group in reader.groups:
        _place(group, source)
        found = [_finish(t, reader.nccl_version) for t in group.tables if t.rows]
        note = _note(found)
        for run in found:
            run.notes += [note] if note else []
            run.skipped = unplaced + group.skipped
        unplaced = [] if found else unplaced + group.skipped
        runs += found
    if runs and unplaced:
        runs[-1].skipped += unplaced
    elif unplaced:
        at, why = unplaced[0]
        raise ParseError(source, at, f"no row could be imported: {why}"
                         + (f" (and {len(unplaced) - 1} more)" if len(unplaced) > 1 else ""), None)
    return runs
