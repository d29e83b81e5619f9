"""The project's own error type: one clear line for the user, never a traceback."""


class MacprofError(Exception):
    """A user-facing error. ``str(err)`` is the complete one-line message."""

    exit_code = 2


class NothingMeasured(MacprofError):
    """A run in which every model was refused or failed: its log is written, but it is no result."""

    exit_code = 3


class EngineMissing(MacprofError):
    """An engine's Python package is not installed."""


def reason(exc: BaseException) -> str:
    """An exception in one line that always says something: its type, and its message where it
    has one (a MemoryError, a bare TemplateError have none: "did not render: " followed by
    nothing was a bug), line breaks folded; a MacprofError's own line as it is."""
    text = " ".join(str(exc).split())
    if isinstance(exc, MacprofError) and text:  # macprof's own line: complete as it is
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
