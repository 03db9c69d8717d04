"""ml-engineering's all_reduce_bench.py (stas00/ml-engineering): its markdown table of payload,
busbw and algbw (units in the cells; `32KB` is 2**15); no times printed, so time = size / algbw."""
from __future__ import annotations

import re

from allreduce_bench.core.errors import UsageError
from allreduce_bench.core.units import parse_bandwidth, parse_size
from allreduce_bench.interop.collective_names import factor_of, world_size_from_factor
from allreduce_bench.interop.lines import ParseError, clean_lines
from allreduce_bench.interop.run import ImportedRun

TOOL = "all_reduce_bench.py"
_SUMMARY = re.compile(r"average bandwidth of (\w+) over (\d+) ranks \((\d+) warmups / (\d+) trials\)")
_VERSIONS = re.compile(r"torch=([^,\s]+)(?:, cuda=([^,\s]+))?(?:, nccl=\(([\d, ]+)\))?")
_DEVICE = re.compile(r"name='([^']+)'")


def looks_like(text: str) -> bool:
    return bool(re.search(r"^\s*\|\s*payload\s*\|", text, re.M))


def parse(text: str, source: str) -> list[ImportedRun]:
    meta: dict = {}
    runs: list[ImportedRun] = []
    columns: list[str] | None = None
    rows: list[dict] = []
    world = collective = None
    first = last = 0

    def flush():
        nonlocal rows, columns
        if rows:
            size = world
            why = f"{size} ranks printed"
            if size is None:
                factor = factor_of(rows)
                size = world_size_from_factor("all_reduce", factor)
                why = f"{size} ranks from busbw/algbw = {factor:.4f}" if size else "world size not printed"
            runs.append(ImportedRun(TOOL, collective or "all_reduce", rows, dict(meta), first, last,
                                    size, why))
        rows, columns = [], None

    for number, line in clean_lines(text):
        if match := _VERSIONS.search(line):
            torch_version, cuda, nccl = match.groups()
            meta["versions"] = {"torch": torch_version, **({"cuda": cuda} if cuda else {}),
                                **({"nccl": ".".join(nccl.replace(" ", "").split(","))} if nccl else {})}
        if line.startswith("- hardware") and (match := _DEVICE.search(line)):
            meta["device_names"] = [match.group(1)]
        if match := _SUMMARY.search(line):
            flush()
            collective, world = match.group(1), int(match.group(2))
            meta["settings"] = {"warmup_iters": int(match.group(3)), "iters": int(match.group(4))}
            continue
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "payload" in cells:
            flush()
            columns, first = cells, number
            continue
        if columns is None or all(set(c) <= set("-: ") for c in cells):
            continue  # the |---:| rule
        if len(cells) != len(columns):
            raise ParseError(source, number, f"a table row with {len(cells)} cells under a header of "
                             f"{len(columns)}")
        named = dict(zip(columns, cells))
        try:
            size = parse_size(re.sub(r"([KMGT])B$", r"\1", named["payload"]), "payload")  # 32KB: 2**15
            algbw = parse_bandwidth(named["algbw"], "algbw") / 1e9
            busbw = parse_bandwidth(named["busbw"], "busbw") / 1e9
        except (KeyError, UsageError) as error:
            raise ParseError(source, number, f"cannot read this row ({error})") from None
        rows.append({"size_bytes": size, "count": None, "type": "", "dtype": "", "in_place": True,
                     "time_us_median": size / (algbw * 1e3) if algbw > 0 else None,
                     "algbw_GBps": algbw, "busbw_GBps": busbw, "time_printed": "",
                     "algbw_printed": named["algbw"], "busbw_printed": named["busbw"],
                     "wrong_printed": "", "payload_printed": named["payload"], "source_line": number})
        last = number
    flush()
    return runs
