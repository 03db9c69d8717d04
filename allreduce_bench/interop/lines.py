"""Lines of a pasted log as the tool printed them: CRLF, indentation and launcher prefixes
(srun --label, mpirun --tag-output) are none of the tool's output."""
from __future__ import annotations

import re

from allreduce_bench.core.errors import UsageError

# `12: ` (srun --label, right-aligned), `[1,0]<stdout>: ` (Open MPI --tag-output)
_PREFIX = re.compile(r"^(?:\d+:\s|\[\d+,\d+\]<std(?:out|err)>:\s?)")


def clean_lines(text: str) -> list[tuple[int, str]]:
    """(1-based line number, the line without prefix, indentation or trailing space)."""
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        for _ in range(2):  # a labelled line can also be indented after its label
            line = _PREFIX.sub("", line).strip()
        found.append((number, line))
    return found


class ParseError(UsageError):
    def __init__(self, source: str, line: int, what: str, hint: str | None = "fix or cut that line"):
        super().__init__(f"{source}:{line}: {what}" + (f"; {hint}" if hint else ""))
        self.source, self.line = source, line
