"""What the fake engine promises beyond the protocol (tests/test_engines.py runs the protocol on
it): its output depends on the token ids only, it reads its model from a GGUF header and
refuses one it cannot use, it holds no more than its context, and it loads no inference library."""

import subprocess
import sys

import pytest

from macprof import engines
from macprof.engines.base import EngineSettings
from macprof.errors import MacprofError


def _engine(path, n_ctx=256):
    engine = engines.create("fake")
    engine.load_model(path, EngineSettings(n_ctx=n_ctx))
    engine.load_tokenizer()
    return engine


def test_output_is_a_function_of_the_ids(fake_dir):
    a, b = _engine(fake_dir / "fake-a.gguf"), _engine(fake_dir / "fake-b.gguf")
    ids = a.tokenize(" abc def bad")
    assert ids == b.tokenize(" abc def bad") and len(ids) == 4  # BOS + three words
    out = list(a.generate(ids, 20))
    assert list(b.generate(ids, 20)) == out  # another engine, another model file: the same tokens
    a.reset()
    assert list(a.generate(ids[:-1] + [ids[-1] + 1], 20)) != out  # another context: other tokens
    assert a.top2(ids).first_id == out[0]


def test_shape_comes_from_the_header(fake_dir):
    from macprof.collect.modelinfo import inspect

    engine = _engine(fake_dir / "fake-a.gguf")
    info = inspect(fake_dir / "fake-a.gguf")
    assert engine.vocab_size == info.vocab_size == 4096
    list(engine.generate(engine.tokenize(" abc def"), 5))
    assert engine.kv_cache_bytes() == engine.cached_tokens() * info.kv_bytes_per_token == 7 * info.kv_bytes_per_token


def test_a_gguf_it_cannot_use_is_refused(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "llama.gguf"
    w = gguf.GGUFWriter(str(path), "llama")  # a real architecture: none of the fake engine's keys
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(MacprofError, match=r"llama\.gguf: not a fake-engine model \(no macprof-fake\.vocab_size"):
        _engine(path)
    (tmp_path / "notes.gguf").write_text("not a model\n")
    with pytest.raises(MacprofError, match=r"notes\.gguf: not a GGUF file \(it does not begin with the GGUF magic\)"):
        _engine(tmp_path / "notes.gguf")


def test_the_context_holds_n_ctx_tokens(fake_dir):
    engine = _engine(fake_dir / "fake-b.gguf", n_ctx=64)
    ids = engine.tokenize(" abc" * 60)
    assert len(list(engine.generate(ids, 4))) == 4  # 61 + 3 fed tokens: exactly full
    engine.reset()
    with pytest.raises(MacprofError, match="exceed the context of 64"):
        list(engine.generate(ids, 5))


def test_imports_no_inference_library(fake_dir):
    code = ("import sys; from macprof import engines; from macprof.engines.base import EngineSettings; "
            "e = engines.create('fake'); e.load_model(sys.argv[1], EngineSettings(n_ctx=64)); "
            "list(e.generate(e.tokenize(' abc'), 3)); "
            "print(sorted(m for m in ('llama_cpp', 'mlx', 'mlx_lm', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code, str(fake_dir / "fake-b.gguf")], capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"


def test_overhead_refuses_it(fake_dir):
    from click.testing import CliRunner

    from macprof.cli import main

    r = CliRunner().invoke(main, ["overhead", "--config", str(fake_dir / "models.toml"), "--models", "fake-b"])
    assert r.exit_code == 2 and "engine 'fake' has none" in r.output and r.output.count("\n") == 1
