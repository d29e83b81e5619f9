"""A local server measured as a model (engine "openai"): what config, the command line and
``--serve`` know about it (macprof/config/__init__.py, macprof/cli/serve.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def without_credentials(url: str) -> str:
    """``url`` less its user:secret@: macprof's requests carry no credentials (engines/wire.py
    sends no Authorization), so a URL's are dropped where it is read, and no log, journal or
    message holds them."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not a URL: the checks that follow say so
        return url
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))


@dataclass(frozen=True)
class Endpoint:
    """A local server measured as a model (engine "openai"): its base URL, the model name it
    serves, its API dialect, and the model's file where known (it sizes the ceiling)."""

    url: str
    model: str
    api: str = "completions"  # chat | completions | ollama (macprof/engines/wire.py)
    file: Path | None = None
    served: dict | None = None  # a server macprof started: its command line and version
    # how the command line named it ({"serve": KIND, "ref": MODEL} or {"endpoint": URL, "model", "api"}),
    # recorded in the journal's run_start so that a bare `--resume` names it again
    origin: dict | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "url", without_credentials(self.url))

    @property
    def named_path(self) -> Path:
        """What names a server whose model file is not known, where a model's path would: its
        URL's host and path."""
        return Path(self.url.split("://", 1)[-1])

    def job(self, timeout: float) -> dict:
        return {"url": self.url, "model": self.model, "api": self.api, "timeout": timeout * 0.8, "timeout_given": timeout,
                "served": self.served, "file": str(self.file) if self.file else None}
