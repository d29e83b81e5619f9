"""Engine settings recorded as resolved: llama.cpp's own log read for what llama.h has no getter
for (flash attention's "auto", the K/V types, the offloaded layers), and `compare` flagging rows
whose resolved settings differ."""

import json

from macprof.analyse.compare import settings_differ
from macprof.engines.llama_cpp_facts import flash_attn_resolved, kv_types_resolved, offloaded_resolved
from tests.conftest import FIXTURES, cli

# lines as llama.cpp 0c1e570 (llama-cpp-python 0.3.36) writes them
CTX_LOG = ["llama_context: flash_attn            = auto",
           "llama_kv_cache: size =    6.00 MiB (   768 cells,   8 layers,  1/1 seqs), K (f16):    3.00 MiB, "
           "V (q8_0):    3.00 MiB",
           "resolve_fused_ops: Flash Attention enabled"]


def test_flash_attention_auto_is_read_from_the_probe():
    assert flash_attn_resolved("auto", CTX_LOG)[0] == "enabled"
    off = ["sched_reserve: reserving ...", "resolve_fused_ops: Flash Attention not supported, set to disabled"]
    value, source = flash_attn_resolved("auto", off)
    assert value == "disabled" and "not supported" in source


def test_flash_attention_asked_or_forced():
    assert flash_attn_resolved("disabled", CTX_LOG[:2])[0] == "disabled"  # no probe runs then
    assert flash_attn_resolved("enabled", [])[0] == "enabled"
    forced = ["llama_init_from_model: flash_attn is not compatible with Grok - forcing off"]
    assert flash_attn_resolved("auto", forced + CTX_LOG)[0] == "disabled"
    required = ["llama_init_from_model: enabling flash_attn since it is required for quantized V cache"]
    assert flash_attn_resolved("auto", required)[0] == "enabled"


def test_flash_attention_unknown_without_its_line():
    value, why = flash_attn_resolved("auto", CTX_LOG[:2])
    assert value is None and "logged no resolution" in why


def test_kv_types_and_offload_from_the_log():
    assert kv_types_resolved(CTX_LOG) == ("f16", "q8_0")
    assert kv_types_resolved(["llama_context: n_ctx = 768"]) is None
    assert offloaded_resolved(["load_tensors: offloaded 33/33 layers to GPU"], True)[0] == 33
    assert offloaded_resolved([], False)[0] == 0  # a CPU-only build offloads nothing, and says so
    assert offloaded_resolved([], True)[0] is None


def test_settings_differ_only_where_both_sides_know():
    mine = {"flash_attn": "enabled", "n_threads": 8, "type_k": "f16"}
    assert settings_differ(mine, {"flash_attn": "disabled", "n_threads": 8}) == ["flash_attn enabled vs disabled"]
    assert settings_differ(mine, {"n_batch": 512}) == []
    assert settings_differ(mine, None) == []


def _with_settings(path, out, **values):
    log = json.loads(path.read_text())
    for m in log["models"]:
        m["engine_settings"] = {k: {"asked": None, "value": v, "source": "test", "unknown": None}
                                for k, v in values.items()}
    out.write_text(json.dumps(log))
    return out


def test_compare_flags_rows_whose_resolved_settings_differ(tmp_path):
    a = _with_settings(FIXTURES / "runlogs/tiny-a.json", tmp_path / "a.json", flash_attn="enabled", n_threads=2)
    b = _with_settings(FIXTURES / "runlogs/tiny-a.json", tmp_path / "b.json", flash_attn="disabled", n_threads=2)
    same = _with_settings(FIXTURES / "runlogs/tiny-a.json", tmp_path / "same.json", flash_attn="enabled")
    rows = json.loads(cli("compare", a, b, same, "--format", "json").output)["rows"]
    flags = {(r["run"], r["engine"]): r["not_comparable"] for r in rows}  # against the baseline, a llama.cpp row
    assert flags[("b", "llama.cpp")] == ["engine settings: flash_attn disabled vs enabled"]
    assert flags[("b", "mlx")] == []  # another engine's settings differ by design, as its version does
    assert flags[("same", "llama.cpp")] == []  # a setting one side does not know is not held against the other
    text = cli("compare", a, b).output
    assert "NOT COMPARABLE" in text and "flash_attn disabled vs enabled" in text
