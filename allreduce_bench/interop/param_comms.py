"""PARAM comms' (facebookresearch/param) `COMMS-RES` lines: a header, then per size the
latency percentiles over ranks, algbw and busbw; the world size is read back from busbw /
algbw, and point-to-point, quantized and paired lines are refused by name."""
from __future__ import annotations

import re

from allreduce_bench.interop.collective_names import FACTORS, factor_of, world_size_from_factor
from allreduce_bench.interop.lines import ParseError, clean_lines
from allreduce_bench.interop.run import ImportedRun

TOOL = "param-comms"
_LINE = re.compile(r"^COMMS-RES(?:-(?P<collective>[A-Za-z_]+))?\s+(?P<rest>.*)$")
_COLLECTIVE = re.compile(r"collective=([A-Za-z_]+)")
_NAMES = {"all_to_all": "alltoall", "all_to_allv": "alltoall", "all_gather_base": "all_gather",
          "reduce_scatter_base": "reduce_scatter"}


def looks_like(text: str) -> bool:
    return "COMMS-RES" in text


def parse(text: str, source: str) -> list[ImportedRun]:
    runs: list[ImportedRun] = []
    rows: list[dict] = []
    named = None
    first = last = 0

    def flush():
        nonlocal rows
        if rows:
            collective = _NAMES.get(rows[0]["collective"], rows[0]["collective"])
            factor = factor_of(rows)
            world_size = world_size_from_factor(collective, factor)
            why = (f"collective named by COMMS-RES-{rows[0]['collective']}; world size "
                   + (f"{world_size} from busbw/algbw = {factor:.3f}" if world_size else "not printed"))
            for row in rows:
                row.pop("collective")
            runs.append(ImportedRun(TOOL, collective, rows, {}, first, last, world_size, why))
        rows = []

    for number, line in clean_lines(text):
        if match := _COLLECTIVE.search(line):
            named = match.group(1)
        match = _LINE.match(line)
        if not match:
            continue
        rest = match.group("rest")
        if rest.startswith(("size", "total-size")) or "Latency" in rest:
            flush()  # a header: the next rows are a new run
            first = number
            continue
        collective = match.group("collective") or named
        if collective is None or (collective not in FACTORS and collective not in _NAMES):
            raise ParseError(source, number, f"a COMMS-RES line of {collective or 'an unnamed collective'}: "
                             "only plain collective results (not pt2pt, quantized or paired) can be imported")
        tokens = rest.split()
        if len(tokens) not in (9, 10):
            raise ParseError(source, number, f"a COMMS-RES line with {len(tokens)} values where "
                             "size, elements, p50, p75, p95, min, max, algbw, busbw [tflops] are expected")
        try:
            size, count = int(tokens[0]), int(tokens[1])
            p50, p75, p95, low, high, algbw, busbw = map(float, tokens[2:9])
        except ValueError:
            raise ParseError(source, number, "a COMMS-RES line whose values are not numbers") from None
        if rows and rows[0]["collective"] != collective:
            flush()
        if not rows:
            first = first or number
        rows.append({"collective": collective, "size_bytes": size, "count": count, "type": "",
                     "dtype": "", "in_place": True, "time_us_median": p50, "time_us_p95": p95,
                     "time_us_min": low, "time_us_max": high, "algbw_GBps": algbw, "busbw_GBps": busbw,
                     "time_printed": tokens[2], "algbw_printed": tokens[7], "busbw_printed": tokens[8],
                     "wrong_printed": "", "source_line": number})
        last = number
    flush()
    return runs
