"""The lines NCCL writes with NCCL_DEBUG set, found anywhere in a line of whatever stream holds
them (launchers prefix lines; several writers tear them, and a torn host name is repaired from
the host its process id has elsewhere in the log, the torn-off text given back as `before`)."""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace

PREFIX = re.compile(
    r"(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<device>[^\]]*)\] "
    r"(?:[\d.]+ )?(?:(?P<origin>\S+:\d+)(?: \([^)]*\))? )?NCCL (?P<level>INFO|WARN|TRACE|CALL)\b ?")
# NCCL_DEBUG=VERSION and nccl-tests print the banner bare; RCCL prints `RCCL version : 2.21.5-...`
BANNER = re.compile(r"\b(?P<library>NCCL|RCCL|HIP|ROCm) version\s*:?\s*(?P<version>\d+\.\d+\.\d+\S*)")

# the end of a launcher's prefix: srun `0:`, Ray `(pid=..)`, `[..]`, a timestamp, `<stdout>:`, `name |`
_LAUNCHER = re.compile(r"(?:[:)\]>|]|\d\d:\d\d(?::\d\d)?(?:[.,]\d+)?Z?)$")


@dataclass(frozen=True)
class NcclLine:
    source: str
    number: int
    host: str
    pid: int
    tid: int
    device: str
    level: str
    message: str
    origin: str | None = None  # file.cc:line of a WARN
    before: str = ""  # another writer's text in front of it on the same line (a torn line)

    @property
    def at(self) -> str:
        return f"{self.source}:{self.number}"

    @property
    def torn(self) -> bool:
        """Another program's text in front (not a launcher's prefix or a timestamp)."""
        return bool(self.before) and not _LAUNCHER.search(self.before)


@dataclass
class LogLines:
    """Every NCCL message of some text, the bare version banners, and the other lines' count."""

    messages: list[NcclLine]
    banners: list[tuple[str, int, str, str]]  # (source, line, library, version)
    foreign: int = 0


def _messages(source: str, number: int, line: str) -> list[NcclLine]:
    found = list(PREFIX.finditer(line))
    out = []
    for index, match in enumerate(found):
        end = found[index + 1].start() if index + 1 < len(found) else len(line)
        out.append(NcclLine(source, number, match["host"], int(match["pid"]), int(match["tid"]),
                            match["device"], match["level"], line[match.end():end].rstrip(),
                            match["origin"], line[:match.start()].strip() if index == 0 else ""))
    return out


def _torn(message: NcclLine, real: str) -> bool:
    """Whether `message.host` is `real` with another writer's characters in front."""
    return not message.host[:-len(real)].isalpha() or message.torn


def hosts_by_pid(messages: list[NcclLine]) -> dict[int, set[str]]:
    found: dict[int, set[str]] = defaultdict(set)
    for message in messages:
        found[message.pid].add(message.host)
    return found


def repair(message: NcclLine, known: dict[int, set[str]]) -> NcclLine:
    """`0mew0` for pid 65704 when that pid is `mew0` elsewhere: the `0` was another line's."""
    real = max((h for h in known.get(message.pid, ()) if h != message.host and message.host.endswith(h)),
               key=len, default=None)
    if real is None or not _torn(message, real):
        return message
    cut = message.host[:-len(real)]
    return replace(message, host=real, before=f"{message.before} {cut}".strip())


def read_lines(text: str, source: str) -> LogLines:
    """The NCCL messages in `text`, torn host names repaired."""
    messages: list[NcclLine] = []
    banners, foreign = [], 0
    for number, line in enumerate(text.splitlines(), 1):
        found = _messages(source, number, line)
        if found:
            messages.extend(found)
            continue
        banner = BANNER.search(line)
        if banner and not line.lstrip("# ").lower().startswith("nccl-tests"):
            banners.append((source, number, banner["library"], banner["version"]))
        elif line.strip():
            foreign += 1
    known = hosts_by_pid(messages)
    return LogLines([repair(m, known) for m in messages], banners, foreign)


def torn_text(line: str, known: dict[int, set[str]]) -> str | None:
    """The text another writer left in front of an NCCL message on `line` (a torn table row)."""
    found = _messages("", 0, line)
    return repair(found[0], known).before if found else None
