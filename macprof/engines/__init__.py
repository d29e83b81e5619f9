"""Engine registry. Engines are imported lazily: `macprof --help`, `compare` and `show` never
import llama.cpp or MLX, and a missing engine gives one line naming the package to install."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from macprof.errors import EngineMissing

if TYPE_CHECKING:
    from macprof.engines.base import AnyEngine

# mypy checks every adapter against its kind's protocol in engines/conformance.py, which nothing imports:
# the registry names the adapters' modules only, so a module that reads it (the log's vocabulary)
# does not depend on every adapter

# engine name -> (adapter module, Python module it needs, pip package to install)
ENGINES = {
    "llama.cpp": ("macprof.engines.llama_cpp", "llama_cpp", 'llama-cpp-python (on Linux: CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install llama-cpp-python)'),
    "mlx": ("macprof.engines.mlx", "mlx_lm", "mlx-lm (with mlx, or mlx[cpu] on Linux)"),
    # deterministic, no inference library: the fast test tier (macprof/engines/fake.py); it reads
    # its header with macprof's own reader (gguf, which imports numpy, only writes its models)
    "fake": ("macprof.engines.fake", "re", "nothing: it uses the standard library"),
    # a local server (Ollama, LM Studio, mlx_lm.server, llama.cpp's): the standard library's HTTP
    "openai": ("macprof.engines.openai", "http.client", "nothing: it uses the standard library"),
}
# what a model path must be for each engine: one GGUF file, or an MLX model directory
MODEL_FORMAT = {"llama.cpp": "gguf", "mlx": "mlx", "fake": "gguf", "openai": "endpoint"}
# the dialects the openai engine speaks to a server in (engines/wire.py), declared here, with no
# import, so that the command line's --api choices (config/settings.py) need not load the client
APIS = ("completions", "chat", "ollama")


def names() -> list[str]:
    return list(ENGINES)


def is_installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(ENGINES[name][1]) is not None


def require(name: str) -> ModuleType:
    """Import the engine's own package, or raise EngineMissing naming what to install."""
    _, module, package = ENGINES[name]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EngineMissing(f"engine {name!r} is not installed ({exc}): pip install {package}") from None


def create(name: str) -> AnyEngine:
    """A fresh, unloaded engine adapter: an ``Engine`` (in process) or a ``ServerEngine``."""
    if name not in ENGINES:
        raise EngineMissing(f"unknown engine {name!r}: choose one of {', '.join(ENGINES)}")
    require(name)
    adapter = importlib.import_module(ENGINES[name][0])
    return adapter.ENGINE()
