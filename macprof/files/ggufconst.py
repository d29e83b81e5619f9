"""The gguf package's constants (GGMLQuantizationType, GGML_QUANT_SIZES, LlamaFileType) without
the rest of the package.

``import gguf`` runs the package's ``__init__``, which imports its reader, its writer and numpy:
about 120 ms in every process that reads a GGUF header (each ``macprof run``, ``inspect`` and
fake-engine worker), while ``gguf/constants.py`` imports only enum and typing (10 ms). So the
file is loaded alone, under a private module name: registering it as ``gguf.constants`` would
leave a later ``import gguf`` without its ``constants`` attribute. macprof reads only names and
sizes from it, never compares its enums with the package's.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from macprof.errors import MacprofError

_NAME = "macprof._gguf_constants"


def load() -> ModuleType:
    """gguf's constants module: the package's own where gguf is imported already, else the file
    loaded alone (once per process)."""
    mod = sys.modules.get("gguf.constants") or sys.modules.get(_NAME)
    if mod is not None:
        return mod
    package = importlib.util.find_spec("gguf")  # a top-level package is found without running its __init__
    if package is None or not package.submodule_search_locations:
        raise MacprofError("the gguf package is not installed: pip install gguf")
    path = Path(list(package.submodule_search_locations)[0]) / "constants.py"
    spec = importlib.util.spec_from_file_location(_NAME, path)
    if spec is None or spec.loader is None:
        raise MacprofError(f"{path}: the gguf package has no constants module")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    sys.modules[_NAME] = mod
    return mod
