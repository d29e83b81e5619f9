"""A local server measured as a model (engine "openai"): what config, the command line and
``--serve`` know about it (macprof/config/__init__.py, macprof/cli/serve.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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

    def job(self, timeout: float) -> dict:
        return {"url": self.url, "model": self.model, "api": self.api, "timeout": timeout * 0.8, "timeout_given": timeout,
                "served": self.served, "file": str(self.file) if self.file else None}
