"""nccl-tests' `-J FILE` JSON (2.17.3+, versions 1-3: doc/interop.md's import table says what
is read); from version 2 the per-iteration times become raw samples, one per process and
iteration. A file `export` wrote names its algorithm in an env line ALLREDUCE_BENCH_ALGORITHM."""
from __future__ import annotations

import json

import pandas as pd

from allreduce_bench.interop.collective_names import TYPES, collective_of_program, guess_collective
from allreduce_bench.interop.lines import ParseError
from allreduce_bench.interop.run import ImportedRun, nccl_version_of_code

TOOL = "nccl-tests"


def looks_like(text: str) -> bool:
    head = text.lstrip()[:4000]
    return head.startswith("{") and '"results"' in text and ('"nccl_version"' in head or '"config"' in head)


def _float(value) -> float | None:
    if value is None:
        return None
    try:
        return float(value)  # "nan" (a string) reads as NaN
    except (TypeError, ValueError):
        return None


def _bool(value):
    return {"true": True, "false": False}.get(value, value) if isinstance(value, str) else value


def _program(args: list) -> str | None:
    return next((collective_of_program(a) and a for a in args[:1]), None) if args else None


def _document(text: str, source: str) -> dict:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise ParseError(source, error.lineno, f"not valid JSON ({error.msg})") from None
    if not isinstance(document, dict) or not isinstance(document.get("results"), list):
        raise ParseError(source, 1, "a JSON document without a `results` list is not nccl-tests' -J output")
    version = document.get("version")
    if version not in (1, 2, 3):
        raise ParseError(source, 1, f"nccl-tests JSON version {version!r}; this importer reads versions 1-3")
    return document


def _half(base: dict, body: dict, in_place: bool, per_iter, processes: dict) -> tuple[dict, list[dict]]:
    """One half of a result as a row, and its per-iteration samples."""
    time_us = _float(body.get("time", body.get("cpu_time")))
    row = {**base, "in_place": in_place, "time_us_median": time_us, "time_us_mean": time_us,
           "time_us_rank_mean": time_us,
           "algbw_GBps": _float(body.get("alg_bw")), "busbw_GBps": _float(body.get("bus_bw")),
           "time_printed": str(body.get("time", body.get("cpu_time"))),
           "algbw_printed": str(body.get("alg_bw")), "busbw_printed": str(body.get("bus_bw")),
           "wrong_printed": str(body.get("nwrong"))}
    wrong = _float(body.get("nwrong"))
    row["wrong"] = int(wrong) if wrong is not None and wrong == wrong else None
    if not isinstance(per_iter, dict):
        return row, []
    times = [t for t in map(_float, per_iter.get("times_us") or []) if t is not None]
    if times:
        row["time_us_median"] = pd.Series(times).median()
    row.update({name: _float(per_iter.get(key)) for name, key in (
        ("time_us_min", "min_us"), ("time_us_max", "max_us"), ("time_us_p95", "p95_us"),
        ("time_us_p99", "p99_us"), ("time_cv_pct", "cv_pct"))})
    return row, _samples(base["size_bytes"], in_place, times, per_iter.get("per_process_max_times_us"),
                         processes)


def _samples(size_bytes: int, in_place: bool, times: list[float], per_process, processes: dict) -> list[dict]:
    """One sample per process and iteration, else the max over processes as rank 0's."""
    base = {"size_bytes": size_bytes, "in_place": in_place, "loops": processes["loops"]}
    ranks, hosts = processes["ranks"], processes["hosts"]
    if isinstance(per_process, list) and len(per_process) > 1 and all(isinstance(p, list) for p in per_process):
        return [{**base, "sample": i, "rank": ranks[r] if r < len(ranks) else r,
                 "host": hosts[r] if r < len(hosts) else "", "time_us": t}
                for r, row in enumerate(per_process) for i, t in enumerate(map(_float, row)) if t is not None]
    return [{**base, "sample": i, "rank": 0, "time_us": t} for i, t in enumerate(times)]


def _processes(document: dict) -> dict:
    """The global rank and host of each per-process list, and the calls per sample (-m)."""
    config: dict = document["config"] if isinstance(document.get("config"), dict) else {}
    devices = [d for d in config.get("devices") or [] if isinstance(d, dict)]
    loops = config.get("aggregated_iterations")
    return {"ranks": [d.get("rank", i) for i, d in enumerate(devices)],
            "hosts": [str(d.get("hostname") or "") for d in devices],
            "loops": loops if isinstance(loops, int) and loops > 0 else 1}


def _rows(document: dict, source: str) -> tuple[list[dict], list[dict]]:
    rows, samples = [], []
    processes = _processes(document)
    for index, result in enumerate(document["results"]):
        if not isinstance(result, dict) or "size" not in result:
            raise ParseError(source, 1, f"results[{index}] has no `size`")
        type_name = str(result.get("type", ""))
        root = str(result.get("root", "")).strip()
        base = {"size_bytes": int(result["size"]), "count": int(result.get("count") or 0) or None,
                "type": type_name, "dtype": TYPES.get(type_name, (type_name, None))[0],
                "redop": str(result.get("redop", "")).strip(),
                "root": int(root) if root.lstrip("-").isdigit() else None,
                "source_line": index}  # JSON has no lines: the index in `results`
        for in_place, half in ((False, "out_of_place"), (True, "in_place")):
            if isinstance(result.get(half), dict):  # null: that half was not run
                row, times = _half(base, result[half], in_place, result.get(f"{half}_per_iter"), processes)
                rows.append(row)
                samples += times
    if not rows:
        raise ParseError(source, 1, "the JSON document has no results")
    return rows, samples


def _meta(document: dict, args: list[str]) -> dict:
    devices = (document.get("config") or {}).get("devices") or []
    meta = {"json_version": document["version"], "start_time": document.get("start_time"),
            "end_time": document.get("end_time"), "command": " ".join(args) or None,
            "settings": {k: _bool(v) for k, v in (document.get("config") or {}).items() if k != "devices"},
            "environment": document.get("env") or []}
    if isinstance(document.get("nccl_version"), int) and document["nccl_version"] > 0:  # 0: no NCCL
        meta["versions"] = {"nccl": nccl_version_of_code(document["nccl_version"])}
    if devices:
        meta["devices"] = [{"rank": d.get("rank"), "group": d.get("group"), "pid": d.get("pid"),
                            "host": d.get("hostname"), "device": d.get("device"),
                            "bus": d.get("device_hex"), "device_name": d.get("device_info")}
                           for d in devices]
        meta["hostnames"] = [d["host"] for d in meta["devices"]]
        meta["device_names"] = [d["device_name"] for d in meta["devices"]]
    average = document.get("average_bus_bandwidth", document.get("average_bus_bandwidith"))
    if isinstance(average, dict):
        meta["avg_busbw_GBps"] = _float(average.get("bandwidth"))
    if isinstance(document.get("out_of_bounds"), dict):
        meta["out_of_bounds"] = {k: _bool(v) for k, v in document["out_of_bounds"].items()}
    return meta


def parse(text: str, source: str) -> list[ImportedRun]:
    document = _document(text, source)
    args = [str(a) for a in document.get("args") or []]
    rows, samples = _rows(document, source)
    meta = _meta(document, args)
    program = _program(args)
    collective = collective_of_program(program) if program else None
    world_size = len(meta.get("devices") or []) or None
    why = f"named by '{program}'" if collective else ""
    if collective is None:
        element = TYPES.get(rows[0]["type"], ("", 1))[1]
        collective, why = guess_collective([r for r in rows if not r["in_place"]] or rows, element,
                                           world_size, has_redop=bool(rows[0]["redop"]) and rows[0]["redop"] != "none",
                                           rooted=any(r["root"] not in (None, -1) for r in rows))
    run = ImportedRun(TOOL, collective, rows, meta, 1, text.count("\n") + 1, world_size, why)
    run.samples = pd.DataFrame(samples) if samples else None
    run.algorithm = _algorithm(document.get("env")) or run.algorithm
    return [run]


def _algorithm(environment) -> str | None:
    for line in environment if isinstance(environment, list) else []:
        name, _, value = str(line).partition("=")
        if name == "ALLREDUCE_BENCH_ALGORITHM" and value:
            return value
    return None
