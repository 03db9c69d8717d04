"""`hang` and `--flight-recorder`: real Flight Recorder dumps of gloo worlds in which one rank
hangs the job (hang_ranks.py), each named correctly; JSON dumps, dumps shaped like torch's
own analyzer's test inputs, missing dumps, bad input; a run stopped by a stalled rank naming it."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from fault_plugin import fault_env
from hang_ranks import KINDS, SEQ, make_dumps, named_correctly

from allreduce_bench.hang import dumps as flight_recorder
from allreduce_bench.hang.verdict import verdict

ROOT = Path(__file__).resolve().parents[2]
N, CULPRIT = 3, 1


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> dict[str, Path]:
    """One world of N ranks per fault kind, rank CULPRIT at fault; their dump folders."""
    base = tmp_path_factory.mktemp("fr")
    for kind in KINDS:
        codes = make_dumps(kind, N, CULPRIT, base / kind, timeout_s=1.0)
        assert None not in codes, f"{kind}: a rank did not end: {codes}"
    return {kind: base / kind for kind in KINDS}


def hang(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "allreduce_bench", "hang", *args],
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", KINDS)
def test_each_fault_names_the_rank_and_the_collective(dumps, kind):
    for folder in (dumps[kind], Path(f"{dumps[kind]}-json")):  # the pickles, torch's JSON dumps
        found = verdict(flight_recorder.read([folder]))
        assert named_correctly(found, kind, CULPRIT) == (True, True), (folder, found.culprits)
        assert found.missing_dumps == ([CULPRIT] if kind == "no_dump" else [])


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_command_writes_hang_json_and_exits_3(dumps, tmp_path):
    done = hang(str(dumps["sleep"]), "--out", str(tmp_path))
    assert done.returncode == 3, done.stderr
    assert f"rank {CULPRIT} never_entered all_reduce #{SEQ}" in done.stdout
    culprits = json.loads((tmp_path / "hang.json").read_text())["culprits"]
    assert [(c["rank"], c["collective"], c["seq"], c["reason"]) for c in culprits] == \
        [(CULPRIT, "all_reduce", SEQ, "never_entered")]
    assert {"host", "input_sizes", "input_dtypes", "stack"} <= set(culprits[0])
    assert any("hang_ranks.py" in frame for frame in culprits[0]["stack"])  # the Python stack


def _raw(path: Path) -> dict:
    return flight_recorder.load(path.read_bytes(), str(path))


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_dumps_that_agree_exit_0_and_json_dumps_say_they_have_no_stack(dumps, tmp_path):
    # the skip world without its third AllReduce: every rank's calls agree
    agree = tmp_path / "agree"
    agree.mkdir()
    for rank in range(N):
        raw = _raw(dumps["skip"] / f"rank{rank}")
        raw["entries"] = [e for e in raw["entries"] if e["collective_seq_id"] < SEQ]
        (agree / f"rank{rank}").write_bytes(pickle.dumps(raw))
    done = hang(str(agree))
    assert done.returncode == 0 and "all 3 dumps agree" in done.stdout, done.stdout + done.stderr
    # torch's JSON dumps carry no stacks: one note says so
    as_json = Path(f"{dumps['size']}-json")
    assert sorted(p.name for p in as_json.iterdir()) == [f"rank{r}.json" for r in range(N)]
    assert any("no `frames`" in note for note in verdict(flight_recorder.read([as_json])).notes)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_missing_dump_beside_a_mismatch_is_a_finding_not_a_culprit(dumps, tmp_path):
    files = [dumps["size"] / f"rank{r}" for r in range(N) if r != 2]
    found = verdict(flight_recorder.read(files), world_size=N)
    assert [(c.rank, c.reason) for c in found.culprits] == [(CULPRIT, "mismatch")]
    assert found.missing_dumps == [2]


def _entry(seq: str, sizes, dtype="float32", op="all_reduce") -> dict:
    # the shape of torch's analyzer test inputs (test/distributed/flight_recorder/
    # test_fr_analysis.py): seq ids as strings, one dtype string, no stack, no timeout
    return {"profiling_name": f"nccl:{op}", "state": "scheduled", "process_group": ("0", "default"),
            "input_sizes": sizes, "output_sizes": sizes, "input_dtypes": dtype,
            "output_dtypes": dtype, "collective_seq_id": seq, "p2p_seq_id": "0",
            "time_created_ns": 0, "frames": [], "record_id": 0, "is_p2p": False}


def test_dumps_shaped_like_torchs_analyzer_test_inputs(tmp_path):
    for rank in range(2):
        second = [[5, 5]] if rank == 1 else [[4, 4]]
        dump = {"version": "2.8", "pg_config": {"0": {"name": "0", "desc": "default", "ranks": "[0, 1]"}},
                "entries": [_entry("1", [[4, 4]]), _entry("2", second)]}
        (tmp_path / f"dump_file_rank_{rank}").write_bytes(pickle.dumps(dump))
    found = verdict(flight_recorder.read([tmp_path]))
    # two ranks disagree: the tie goes to the call both agreed on before ([[4, 4]])
    assert [(c.rank, c.reason, c.seq, c.input_sizes) for c in found.culprits] == \
        [(1, "mismatch", 2, [[5, 5]])]


@pytest.mark.slow
def test_bad_input_is_one_line_exit_2(tmp_path):
    (tmp_path / "rank0").write_text("not a dump\n")
    done = hang(str(tmp_path / "rank0"))
    assert done.returncode == 2 and "not a Flight Recorder dump" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr

    class Evil:
        def __reduce__(self):
            return os.system, ("touch " + str(tmp_path / "ran"),)

    (tmp_path / "rank1").write_bytes(pickle.dumps({"version": "2.10", "entries": [Evil()]}))
    done = hang(str(tmp_path / "rank1"))
    assert done.returncode == 2 and "names the Python object" in done.stderr
    assert not (tmp_path / "ran").exists()  # refused, never run
    empty = tmp_path / "empty"
    empty.mkdir()
    assert hang(str(empty)).returncode == 2
    (empty / "rank0").write_bytes(pickle.dumps({"version": "2.10", "pg_config": {}, "entries": []}))
    done = hang(str(empty))
    assert done.returncode == 2 and "hold no collective" in done.stderr
    assert hang(str(tmp_path / "nowhere")).returncode == 2


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_a_run_stopped_by_a_stalled_rank_names_it_from_the_dumps(tmp_path):
    out = tmp_path / "run"
    env = fault_env("rank=1,after_rows=1,action=stall,seconds=120", {**os.environ, "PYTHONPATH": str(ROOT)})
    done = subprocess.run([sys.executable, "-m", "allreduce_bench", "run", "--world-sizes", "2",
                           "--algos", "native", "--sizes", "4K,8K", "--iters", "1", "--warmup", "0",
                           "--no-plot", "--timeout", "3", "--flight-recorder", "--out", str(out)],
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 1, done.stderr
    line = next(x for x in done.stderr.splitlines() if "flight recorder:" in x)
    assert "rank 1" in line and "no_dump all_reduce" in line, line
    assert (out / "flight-recorder" / "rank0").exists() and not (out / "flight-recorder" / "rank1").exists()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_an_unreachable_health_verdict_says_on_which_collective(dumps):
    from allreduce_bench.hang.verdict import annotate_unreachable

    found = verdict(flight_recorder.read([dumps["no_dump"]]), [f"node{r}" for r in range(N)])
    doc = {"hosts": [{"host": f"node{r}", "verdict": "unreachable" if r == CULPRIT else "ok",
                      "why": "did not answer within the timeout in round 1" if r == CULPRIT else ""}
                     for r in range(N)]}
    hosts = annotate_unreachable(doc, found)["hosts"]
    assert hosts[CULPRIT]["collective"]["collective"] == "all_reduce"
    assert hosts[CULPRIT]["why"].endswith(f"hung in all_reduce #{SEQ} of group 0 (default_pg) (rank {CULPRIT}: "
                                          "no_dump, flight recorder)")
    assert "collective" not in hosts[0]


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_dumps_are_read_without_torch(dumps):
    code = ("import sys; from pathlib import Path; from allreduce_bench.hang import dumps as flight_recorder; "
            "from allreduce_bench.hang.verdict import verdict; "
            f"found = verdict(flight_recorder.read([Path({str(dumps['skip'])!r})])); "
            "print([c.rank for c in found.culprits], 'torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == [f"[{CULPRIT}]", "False"], done.stdout + done.stderr


def test_a_backend_without_completions_shows_none_recorded_not_an_empty_column():
    from allreduce_bench.hang.cli import tables
    from allreduce_bench.hang.verdict import Verdict

    row = {"seq": 7, "collective": "all_reduce float32[4]", "entered": [0, 1], "completed": [],
           "never_reached": [], "other_call": {}, "state": ["scheduled"]}
    group = {"group": "0", "desc": "default_pg", "members": [0, 1], "no_dump": [], "parted_at": None,
             "collectives": [row]}
    gloo = tables(Verdict(ranks=[0, 1], dumped=[0, 1], culprits=[], missing_dumps=[], groups=[group], notes=[]))
    assert "0,1          -            " in gloo and "the backend records no completion" in gloo
    nccl = {**group, "collectives": [{**row, "completed": [0, 1], "state": ["completed"]}]}
    text = tables(Verdict(ranks=[0, 1], dumped=[0, 1], culprits=[], missing_dumps=[], groups=[nccl], notes=[]))
    assert "records no completion" not in text and "0,1          0,1" in text
