"""benchmarks/mlx_floor_check.py: what macprof uses of mlx-lm, read from its own source, and
whether an mlx-lm wheel has it (pyproject's floor, in the slow tier)."""

import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
_spec = importlib.util.spec_from_file_location("mlx_floor_check", ROOT / "benchmarks" / "mlx_floor_check.py")
floor = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = floor  # its dataclass looks its module up there
_spec.loader.exec_module(floor)

SOURCE = '''
import mlx_lm
from mlx_lm.utils import load_model as lm
from mlx_lm.generate import BatchGenerator

PROBE = """
from mlx_lm.convert import convert
"""


def run(path):
    model, _ = lm(path, lazy=True)
    cache = mlx_lm.models.cache.make_prompt_cache(model)
    gen = BatchGenerator(model, stream=None)
    gen.next_generated()
    other = object()
    other.next_generated()
    return [sys.executable, "-m", "mlx_lm", "server", "--model", path, "--log-level", "WARNING"]
'''


def test_the_scanner_finds_imports_calls_keywords_instances_probes_and_commands():
    uses = floor.scan_source(SOURCE, "x.py")
    found = {(u.kind, u.module, u.name, u.detail) for u in uses}
    assert found == {
        ("module", "mlx_lm", "", ""),
        ("module", "mlx_lm.utils", "", ""),
        ("name", "mlx_lm.utils", "load_model", ""),
        ("keyword", "mlx_lm.utils", "load_model", "lazy"),  # through its alias, inside a function
        ("name", "mlx_lm.models.cache", "make_prompt_cache", ""),  # a chain on the imported package, whole
        ("module", "mlx_lm.generate", "", ""),
        ("name", "mlx_lm.generate", "BatchGenerator", ""),
        ("keyword", "mlx_lm.generate", "BatchGenerator", "stream"),
        ("attribute", "mlx_lm.generate", "BatchGenerator.next_generated", ""),  # not other.next_generated
        ("module", "mlx_lm.convert", "", ""),  # from the probe held in a string
        ("name", "mlx_lm.convert", "convert", ""),
        ("module", "mlx_lm.__main__", "", ""),
        ("module", "mlx_lm.server", "", ""),
        ("flag", "mlx_lm.server", "", "--model"),
        ("flag", "mlx_lm.server", "", "--log-level"),
    }
    probe = next(u for u in uses if u.module == "mlx_lm.convert" and u.name)
    assert probe.where == "x.py:7"  # the line in the file, not in the string


WHEEL = {
    "mlx_lm/__init__.py": "from ._version import __version__\nfrom .generate import stream_generate\n",
    "mlx_lm/_version.py": "__version__ = '9.9.9'\n",
    "mlx_lm/__main__.py": "",
    "mlx_lm/server.py": "def main():\n    parser.add_argument('--model')\n",
    "mlx_lm/generate.py": (
        "def stream_generate(model, tokenizer, prompt, **kwargs): ...\n"
        "class BatchGenerator:\n"
        "    def __init__(self, model, *, max_tokens=128):\n        self._stream = None\n"
        "    def insert(self, prompts): ...\n"
    ),
}


def test_a_wheel_is_read_as_source_following_re_exports():
    wheel = floor.Wheel(WHEEL, "9.9.9")
    Use = floor.Use

    def ok(use):
        return floor.check(use, wheel)[0]

    assert ok(Use("name", "mlx_lm", "stream_generate")) and ok(Use("name", "mlx_lm", "__version__"))
    assert ok(Use("keyword", "mlx_lm", "stream_generate", "max_tokens"))  # taken by **kwargs
    assert "**kwargs" in floor.check(Use("keyword", "mlx_lm", "stream_generate", "max_tokens"), wheel)[1]
    assert ok(Use("keyword", "mlx_lm.generate", "BatchGenerator", "max_tokens"))
    assert not ok(Use("keyword", "mlx_lm.generate", "BatchGenerator", "stream"))
    assert ok(Use("attribute", "mlx_lm.generate", "BatchGenerator.insert"))
    assert ok(Use("attribute", "mlx_lm.generate", "BatchGenerator._stream"))  # set in __init__
    assert not ok(Use("attribute", "mlx_lm.generate", "BatchGenerator.next_generated"))
    assert not ok(Use("name", "mlx_lm.sample_utils", "greedy_sampler"))
    assert ok(Use("flag", "mlx_lm.server", detail="--model")) and not ok(Use("flag", "mlx_lm.server", detail="--log-level"))
    assert floor.floor_version('    "mlx-lm>=0.31.3; sys_platform != \'darwin\'",') == "0.31.3"


def test_the_batch_api_check_covers_what_the_batch_path_uses():
    """batch_api_missing checks BATCH_KEYWORDS and BATCH_METHODS: exactly what generate_batch
    passes to BatchGenerator and calls on it, as the scanner reads them from the source."""
    from macprof.engines import mlx

    uses = floor.scan_package(ROOT / "macprof")
    in_mlx = [u for u in uses if u.where.startswith("macprof/engines/mlx.py") and u.name.startswith("BatchGenerator")]
    assert {u.detail for u in in_mlx if u.kind == "keyword"} == set(mlx.BATCH_KEYWORDS)
    assert {u.name.split(".")[1] for u in in_mlx if u.kind == "attribute"} == set(mlx.BATCH_METHODS)


@pytest.mark.slow
def test_the_floor_wheel_has_every_mlx_lm_name_macprof_uses():
    version = floor.floor_version((ROOT / "pyproject.toml").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        try:
            wheel = floor.fetch(version, Path(tmp))
        except RuntimeError as e:
            pytest.skip(f"the mlx-lm {version} wheel cannot be had here: {e}")
        out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "mlx_floor_check.py"), str(wheel)],
                             capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(f"mlx-lm {version}: ") and "MISS" not in out.stdout
