"""Progress on the long commands: a bar with what is measured, how far and the time left, drawn
only where stderr is a terminal; piped or logged output keeps the plain lines."""
from __future__ import annotations

import fcntl
import io
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest

from allreduce_bench.core.measure.console import Console, RowBar, progress_bar, row_label

CLI = [sys.executable, "-m", "allreduce_bench"]


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_bar_when_stderr_is_not_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    bar = progress_bar(3, "measurements", enabled=True, description="ring N=2 4K")
    bar.update(3)
    bar.close()
    assert bar.disable and sys.stderr.getvalue() == ""


def test_a_bar_says_what_how_far_and_the_time_left_on_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    monkeypatch.setenv("COLUMNS", "120")
    bar = progress_bar(4, "measurements", enabled=True)
    bar.set_description("ring N=4 16M, round 2/4")
    bar.update(1)
    bar.refresh()
    drawn = sys.stderr.getvalue()
    bar.close()
    assert "ring N=4 16M, round 2/4" in drawn and "1/4 measurements" in drawn and "left]" in drawn


def test_only_rank_0_draws(monkeypatch):
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    bar = progress_bar(4, "rows", enabled=False)
    bar.update(4)
    bar.close()
    assert sys.stderr.getvalue() == ""


def test_the_console_counts_every_round_and_resumed_rows(monkeypatch):
    monkeypatch.setattr(sys, "stderr", FakeTerminal())
    console = Console(total=3, enabled=True, rounds=4)
    console.skipped()  # a resumed run's finished row: its 4 rounds at once
    for index in range(4):
        console.measuring("ring", 2, 4096, index)
    assert console.bar.total == 12 and console.bar.n == 4 + 3  # the 4th still under way
    console.close()
    assert console.bar.n == 8


def test_row_lines_print_whether_or_not_a_bar_is_drawn(monkeypatch, capsys):
    bar = RowBar(2, "ddp", enabled=True)  # pytest's captured stderr is no terminal
    bar.show(lambda row: print(f"N={row['world_size']} {row['measure']}"), {"world_size": 2,
                                                                            "measure": "step"})
    bar.close()
    out = capsys.readouterr()
    assert out.out == "N=2 step\n" and out.err == ""
    assert row_label({"world_size": 4, "measure": "comm", "bucket_mb": 25.0}) == "N=4 comm bucket 25 MiB"
    assert row_label({"world_size": 2, "link": "inter", "operation": "p2p", "size_bytes": 1 << 20,
                      "bucket_mb": float("nan")}) == "N=2 inter p2p 1M"


def _on_a_terminal(args: list[str]) -> str:
    """stdout and stderr of `allreduce-bench ARGS` on a pseudo-terminal 120 columns wide."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(CLI + args, stdout=follower, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=300)
    os.close(leader)
    assert process.returncode == 0, b"".join(chunks).decode(errors="replace")
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_run_draws_its_bar_on_a_terminal_and_none_into_a_pipe(tmp_path):
    args = ["run", "--world-sizes", "2", "--algos", "native", "--sizes", "4K,64K", "--rounds", "2",
            "--samples", "2", "--loops", "1", "--no-plot"]
    shown = _on_a_terminal([*args, "--out", str(tmp_path / "tty")])
    assert "sizes 4096, 65536 B" in shown  # the first line: the bytes measured
    assert "native N=2 64K, round 2/2" in shown and "measurements [" in shown and "left]" in shown
    piped = subprocess.run(CLI + [*args, "--out", str(tmp_path / "pipe")], capture_output=True,
                           text=True, timeout=300)
    assert piped.returncode == 0, piped.stderr
    assert "measurements" not in piped.stdout + piped.stderr and "\r" not in piped.stderr
    assert "native: world size 2" in piped.stdout  # the table itself is there


def test_health_says_its_rounds_and_time_up_front():
    from allreduce_bench.health.cli import estimate

    options = dict(device=None, backend="auto", expect=None, pairs="quick", bisect=False,
                   sizes=None, samples=None, budget=None)
    assert estimate(options, 4, 1).startswith("; 2 round(s) planned (3 at most), ~")
