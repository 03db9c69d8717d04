"""The one exception type that the CLI turns into a one-line message and exit code 2."""


class UsageError(Exception):
    """Bad input from the user: the message says what is wrong and what to do."""
