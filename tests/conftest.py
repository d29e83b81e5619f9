import os
from pathlib import Path

import pytest
from hypothesis import settings

# Tests never reach a model hub, and share one build of the tiny demo models.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

FIXTURES = Path(__file__).parent / "fixtures"

# The fuzzers (test_fuzz.py) try 150 examples each in the whole suite; the fast tier
# (-m "not slow") tries 20, since every run-log example is a schema validation of ~0.1 s.
settings.register_profile("full", max_examples=150)
settings.register_profile("fast", max_examples=20)


def pytest_configure(config):
    if config.getoption("hypothesis_profile", None) is None:  # an explicit --hypothesis-profile wins
        settings.load_profile("fast" if "not slow" in (config.getoption("markexpr") or "") else "full")


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory) -> Path:
    """A private macprof cache (sha256 cache, demo models) for the whole session."""
    root = tmp_path_factory.mktemp("macprof-cache")
    os.environ["MACPROF_CACHE"] = str(root)
    return root


@pytest.fixture
def tiny_dir(request, tiny_build) -> Path:
    """The tiny demo models: for the real engines, so only for tests marked slow."""
    if request.node.get_closest_marker("slow") is None:
        pytest.fail("the demo models run the real engines: mark the test @pytest.mark.slow, or use fake_dir")
    return tiny_build


@pytest.fixture(scope="session")
def tiny_build(cache_root) -> Path:
    """The build itself, shared; a module-scoped fixture reaches it only through a slow param."""
    from macprof.demo.build import build

    return build("tiny", cache_root / "demo")


# The fast tier's models: fake-engine GGUFs (macprof/engines/fake.py), fake-a the larger.
FAKE_MODELS = {"fake-a": {"hidden": 64}, "fake-b": {"hidden": 32}}


@pytest.fixture(scope="session")
def fake_dir(cache_root) -> Path:
    """Two fake-engine models and their models.toml, written in well under a second."""
    from macprof.engines.fake import write_model

    root = cache_root / "fake"
    root.mkdir()
    toml = []
    for name, shape in FAKE_MODELS.items():
        write_model(root / f"{name}.gguf", **shape)
        toml.append(f'[[models]]\nname = "{name}"\nengine = "fake"\npath = "{name}.gguf"\n')
    (root / "models.toml").write_text("\n".join(toml))
    return root


GGUF_VARIANTS = [("f16", "gguf/demo-tiny-f16.gguf"), ("q8_0", "gguf/demo-tiny-q8_0.gguf"),
                 ("q4_k_m", "gguf/demo-tiny-q4_k_m.gguf")]
MLX_VARIANTS = [("mlx-f16", "mlx/demo-tiny-f16"), ("mlx-8bit", "mlx/demo-tiny-8bit"),
                ("mlx-4bit", "mlx/demo-tiny-4bit")]
ALL_VARIANTS = [("llama.cpp", *v) for v in GGUF_VARIANTS] + [("mlx", *v) for v in MLX_VARIANTS]
