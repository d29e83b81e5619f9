"""The project's own error type: one clear line for the user, never a traceback."""


class MacprofError(Exception):
    """A user-facing error. ``str(err)`` is the complete one-line message."""

    exit_code = 2


class NothingMeasured(MacprofError):
    """A run in which every model was refused or failed: its log is written, but it is no result."""

    exit_code = 3


class EngineMissing(MacprofError):
    """An engine's Python package is not installed."""
