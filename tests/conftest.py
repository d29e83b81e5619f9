import os
from pathlib import Path

import pytest

# Tests never reach a model hub, and share one build of the tiny demo models.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory) -> Path:
    """A private macprof cache (sha256 cache, demo models) for the whole session."""
    root = tmp_path_factory.mktemp("macprof-cache")
    os.environ["MACPROF_CACHE"] = str(root)
    return root


@pytest.fixture(scope="session")
def tiny_dir(cache_root) -> Path:
    from macprof.demo.build import build

    return build("tiny", cache_root / "demo")


GGUF_VARIANTS = [("f16", "gguf/demo-tiny-f16.gguf"), ("q8_0", "gguf/demo-tiny-q8_0.gguf"),
                 ("q4_k_m", "gguf/demo-tiny-q4_k_m.gguf")]
MLX_VARIANTS = [("mlx-f16", "mlx/demo-tiny-f16"), ("mlx-8bit", "mlx/demo-tiny-8bit"),
                ("mlx-4bit", "mlx/demo-tiny-4bit")]
ALL_VARIANTS = [("llama.cpp", *v) for v in GGUF_VARIANTS] + [("mlx", *v) for v in MLX_VARIANTS]
