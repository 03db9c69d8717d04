"""The exception the CLI turns into one line and exit code 2, and the exit codes ranks share."""
from __future__ import annotations

PEER_LOST_EXIT = 3  # a rank whose collective failed or timed out exits with this code
TERMINATED_EXIT = 143  # a rank its launcher ended (SIGTERM), as a shell reports 128 + 15


class UsageError(Exception):
    """Bad input from the user: the message says what is wrong and what to do."""


def is_out_of_memory(error: BaseException) -> bool:
    """torch's OutOfMemoryError, MemoryError, or an allocator's message saying so."""
    text = str(error).lower()
    return (isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError"
            or "out of memory" in text or "can't allocate memory" in text
            or "cannot allocate memory" in text)
