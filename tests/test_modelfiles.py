"""Model files read bounded and type-checked: every faulty file here is made by the test, and
each gives one line naming the file and what is wrong (MacprofError), never a traceback, a
huge allocation or an open() that blocks."""

import json
import os
import socket
import struct
import subprocess
import sys

import gguf
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from macprof import config
from macprof.collect import facts, modelinfo
from macprof.files import fileid, filekind, ggufheader
from macprof.errors import MacprofError


# -- hand-made GGUF bytes ------------------------------------------------------------------
def _s(text) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, vtype: int, payload: bytes) -> bytes:
    return _s(key) + struct.pack("<I", vtype) + payload


def _u32(key, v):
    return _kv(key, 4, struct.pack("<I", v))


def _tensor(name, dims, ttype=0, offset=0) -> bytes:  # ttype 0 = F32
    return _s(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, ttype, offset)


def _gguf(path, kvs=(), tensors=(), data=b"", n_kv=None, n_tensors=None, version=3):
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                                 len(kvs) if n_kv is None else n_kv)
    body = head + b"".join(kvs) + b"".join(tensors)
    path.write_bytes(body + b"\0" * (-len(body) % 32) + data)
    return path


ARCH = _kv("general.architecture", 8, _s("llama"))


def _refused(path, *parts, named=None):
    """inspect(path) raises one line that starts with the faulty file (``named``, else path)."""
    with pytest.raises(MacprofError) as err:
        modelinfo.inspect(path)
    message = str(err.value)
    assert "\n" not in message and message.startswith(str(named or path)), message
    for part in parts:
        assert part in message, message
    return message


# -- 1. bounded ----------------------------------------------------------------------------
def test_array_of_2_62_int32_is_refused_not_allocated(tmp_path):
    p = _gguf(tmp_path / "m.gguf", [ARCH, _kv("llama.big", 9, struct.pack("<IQ", 5, 2**62))])
    size = p.stat().st_size
    assert _refused(p) == f"{p}: GGUF header: array of 2^62 elements at key llama.big exceeds the file's {size} bytes " \
                          f"(truncated or corrupt GGUF file)"


W = _tensor("w", [8])
LENGTHS = {  # case -> (key/values, tensors, other header fields), what the one line says
    "string length": (([_kv("general.architecture", 8, struct.pack("<Q", 2**63) + b"llama")], []), {},
                      ["the string at key general.architecture (2^63 bytes) exceeds"]),
    "key count": (([ARCH], []), {"n_kv": 2**40}, ["a key/value count of 2^40 (at least 13 bytes each) exceeds"]),
    "tensor count": (([ARCH], []), {"n_tensors": 2**50}, ["a tensor count of 2^50 (at least 24 bytes each) exceeds"]),
    "n_dims": (([ARCH], [_s("w") + struct.pack("<I", 7) + b"\0" * 80]), {},
               ["tensor 'w' has 7 dimensions (GGML allows at most 4)"]),
    "string array": (([ARCH, _kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, 2**61))], []), {},
                     ["array of 2^61 elements at key tokenizer.ggml.tokens exceeds"]),
    "string in array": (([ARCH, _kv("tokenizer.ggml.tokens", 9, struct.pack("<IQQ", 8, 2, 1) + b"a"
                                     + struct.pack("<Q", 2**62) + b"b")], []), {},
                        ["string #1 (2^62 bytes) of the array at key tokenizer.ggml.tokens exceeds"]),
    "nested arrays": (([ARCH, _kv("x", 9, struct.pack("<IQ", 9, 1) * 6 + struct.pack("<IQ", 4, 0))], []), {},
                      ["arrays nested more than 4 deep at key x"]),
    "tensor data": (([], [_tensor("w", [1000, 1000])]), {},
                    ["GGUF tensor data: tensor 'w' (bytes 96 to 4000096) exceeds the file's 96 bytes"]),
    "dims product": (([ARCH], [_tensor("w", [2**32, 2**32])]), {}, ["GGUF tensor data: tensor 'w'", "exceeds the file's"]),
    # well within the file, yet malformed
    "duplicate key": (([ARCH, ARCH], []), {}, ["key general.architecture appears twice"]),
    "duplicate tensor": (([ARCH], [W, W]), {"data": b"\0" * 64}, ["tensor 'w' appears twice"]),
    "unknown tensor type": (([ARCH], [_tensor("w", [8], ttype=99)]), {"data": b"\0" * 64},
                            ["tensor 'w' has unknown type 99"]),
    "partial block": (([ARCH], [_tensor("w", [33], ttype=8)]), {"data": b"\0" * 64},
                      ["tensor 'w': rows of 33 elements are not whole Q8_0 blocks of 32"]),
    "misaligned offset": (([ARCH], [_tensor("w", [1], offset=4)]), {"data": b"\0" * 64},
                          ["tensor 'w': data offset 4 is not a multiple of the alignment 32"]),
    "alignment type": (([ARCH, _kv("general.alignment", 10, struct.pack("<Q", 32))], []), {},
                       ["key general.alignment must be UINT32, not UINT64 32"]),
    "alignment value": (([ARCH, _u32("general.alignment", 48)], []), {},
                        ["key general.alignment must be a power of two, not 48"]),
    "unknown value type": (([ARCH, _kv("x", 13, b"\0" * 8)], []), {}, ["unknown value type 13 at key x"]),
    "long architecture": (([_kv("general.architecture", 8, _s("x" * 70_000))], []), {},
                          ["GGUF key general.architecture holds a string of more than 65536 bytes"]),
    "key not utf-8": (([ARCH, _s(b"\xff\xfe\xfd") + struct.pack("<II", 4, 0)], []), {}, ["key #1 is not UTF-8 text"]),
    "long key": (([ARCH, _u32("x" * 70_000, 0)], []), {}, ["key #1 is longer than 65536 bytes"]),
}


@pytest.mark.parametrize("case", LENGTHS)
def test_lengths_and_layout_are_checked(tmp_path, case):
    (kvs, tensors), extra, parts = LENGTHS[case]
    _refused(_gguf(tmp_path / "m.gguf", kvs, tensors, **extra), *parts)


def test_big_endian_gguf(tmp_path):
    p = tmp_path / "m.gguf"
    p.write_bytes(b"GGUF" + struct.pack(">IQQ", 3, 0, 0))
    _refused(p, "a big-endian GGUF file (version 3 byte-swapped); llama.cpp on this machine reads little-endian")


# -- 2. type-checked ----------------------------------------------------------------------
def _written(path, values: dict):
    """A small valid GGUF with chosen key/values, written by the gguf package itself."""
    w = gguf.GGUFWriter(str(path), "llama")
    for key, (kind, value) in values.items():
        getattr(w, f"add_{kind}")(key, value)
    w.add_tensor("token_embd.weight", np.zeros((100, 64), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize("key,kind,value,expected", [
    ("llama.embedding_length", "string", "4096", "must be a non-negative integer, not a string ('4096')"),
    ("llama.block_count", "float32", 2.0, "must be a non-negative integer, not FLOAT32 2.0"),
    ("llama.attention.head_count", "int32", -4, "must be a non-negative integer, not INT32 -4"),
    ("llama.context_length", "bool", True, "must be a non-negative integer, not BOOL True"),
    ("general.file_type", "string", "Q4_K_M", "must be a non-negative integer, not a string ('Q4_K_M')"),
    ("tokenizer.ggml.tokens", "uint32", 5, "must be an array, not UINT32 5"),
])
def test_gguf_values_of_the_wrong_type(tmp_path, key, kind, value, expected):
    p = _written(tmp_path / "m.gguf", {key: (kind, value)})
    _refused(p, f"GGUF key {key} {expected}")


def test_architecture_of_the_wrong_type(tmp_path):
    p = _gguf(tmp_path / "m.gguf", [_u32("general.architecture", 7)])
    _refused(p, "GGUF key general.architecture must be a string, not UINT32 7")


def test_per_layer_head_counts(tmp_path):
    """OpenELM-style arrays: one value when every layer agrees, unknown (None) otherwise."""
    same = _written(tmp_path / "same.gguf", {"llama.attention.head_count": ("array", [4, 4, 4]),
                                             "llama.attention.head_count_kv": ("array", [2, 2, 2]),
                                             "llama.block_count": ("uint32", 3)})
    info = modelinfo.inspect(same)
    assert (info.n_heads, info.n_kv_heads) == (4, 2)
    varying = _written(tmp_path / "varying.gguf", {"llama.attention.head_count_kv": ("array", [2, 4, 0]),
                                                   "llama.block_count": ("uint32", 3)})
    info = modelinfo.inspect(varying)
    assert info.n_kv_heads is None and info.kv_bytes_per_token is None


def test_vocabulary_crossing_buffer_boundaries(tmp_path, monkeypatch):
    """A 70,000-token vocabulary (past the 1 MiB read buffer) then more keys: the walk over the
    strings lands exactly on the next key, at every buffer size."""
    tokens = [f"piece_{i}_" + "x" * (i % 17) for i in range(70_000)]
    p = _written(tmp_path / "vocab.gguf", {"tokenizer.ggml.tokens": ("array", tokens),
                                           "llama.context_length": ("uint32", 4096),
                                           "llama.attention.head_count": ("uint32", 4)})
    expected = modelinfo.inspect(p).to_dict()
    assert expected["context_length"] == 4096 and expected["n_params"] == 6400 and expected["n_heads"] == 4
    for chunk in (1, 7, 4096):
        monkeypatch.setattr(ggufheader, "CHUNK", chunk)
        assert modelinfo.inspect(p).to_dict() == expected
    # without token_embd and vocab_size, the vocabulary is the token list's length
    header = ggufheader.read_header(p, lambda key: False)
    assert header.array_length("tokenizer.ggml.tokens") == 70_000


@pytest.mark.slow
def test_demo_figures_at_every_buffer_size(tiny_dir, monkeypatch):
    path = tiny_dir / "gguf/demo-tiny-q4_k_m.gguf"
    expected = modelinfo.inspect(path).to_dict()
    monkeypatch.setattr(ggufheader, "CHUNK", 13)
    assert modelinfo.inspect(path).to_dict() == expected


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def small_gguf(tmp_path_factory) -> bytes:
    p = tmp_path_factory.mktemp("fuzz") / "base.gguf"
    return _written(p, {"tokenizer.ggml.tokens": ("array", [f"t{i}" for i in range(20)]),
                        "llama.block_count": ("uint32", 2), "llama.attention.head_count": ("array", [4, 4]),
                        "general.alignment": ("uint32", 32)}).read_bytes()


@FUZZ
@given(at=st.integers(0, 700), junk=st.binary(min_size=1, max_size=9), cut=st.integers(1, 13_500))
def test_fuzzed_gguf_headers(tmp_path, small_gguf, at, junk, cut):
    """Bytes overwritten anywhere in the header, the file cut anywhere: figures or one line."""
    raw = bytearray(small_gguf)
    raw[at:at + len(junk)] = junk
    p = tmp_path / "f.gguf"
    p.write_bytes(bytes(raw[:cut]))
    try:
        modelinfo.inspect(p)
    except MacprofError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(str(p))


# -- safetensors and MLX config.json ---------------------------------------------------------
def _mlx(tmp_path, cfg=None, header=None, data=b"\0" * 16):
    d = tmp_path / "mlx"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 4,
                                               "num_attention_heads": 2} if cfg is None else cfg))
    header = {"model.embed_tokens.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}} \
        if header is None else header
    raw = json.dumps(header).encode() if isinstance(header, dict) else header
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return d


def test_a_valid_mlx_directory(tmp_path):
    info = modelinfo.inspect(_mlx(tmp_path))
    assert (info.n_params, info.tensor_bytes, info.n_layers, info.head_dim) == (4, 16, 2, 2)


def _entry(**kw):
    return {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16], **kw}}


@pytest.mark.parametrize("header,parts", [
    (_entry(data_offsets=[-1, 15]), ["tensor 'w': data_offsets must be two non-negative integers, not [-1, 15]"]),
    (_entry(data_offsets=[0]), ["tensor 'w': data_offsets must be two non-negative integers, not [0]"]),
    (_entry(data_offsets=["0", 16]), ["data_offsets must be two non-negative integers, not ['0', 16]"]),
    (_entry(data_offsets=[False, 16]), ["data_offsets must be two non-negative integers, not [False, 16]"]),
    (_entry(data_offsets=[16, 0]), ["tensor 'w': data_offsets [16, 0] must satisfy begin <= end <= 16"]),
    (_entry(data_offsets=[0, 2**70]), ["tensor 'w': data_offsets [0, 1180591620717411303424] must satisfy"]),
    (_entry(shape=[2, "2"]), ["tensor 'w': shape must be a list of non-negative integers, not [2, '2']"]),
    (_entry(dtype=4), ["tensor 'w': dtype must be a string, not 4"]),
    (_entry(shape=[3, 2]), ["tensor 'w': 16 bytes of data for shape [3, 2] of F32, which takes 24"]),
    ({"w": [0, 16]}, ["tensor 'w': must be an object with dtype, shape and data_offsets, not [0, 16]"]),
    (b"[" * 100_000, ["corrupt safetensors header (RecursionError"]),
    (b"[1, 2]", ["corrupt safetensors header (not a JSON object)"]),
])
def test_safetensors_headers(tmp_path, header, parts):
    d = _mlx(tmp_path, header=header)
    _refused(d, *parts, named=d / "model.safetensors")


def test_safetensors_header_length_bounded_by_the_file(tmp_path):
    d = _mlx(tmp_path)
    f = d / "model.safetensors"
    f.write_bytes(struct.pack("<Q", 2**62) + b"{}")
    with pytest.raises(MacprofError, match=r"corrupt safetensors header \(claims 4611686018427387904 bytes; the file has 10\)"):
        modelinfo.inspect(d)


@pytest.mark.parametrize("cfg,parts", [
    ([1, 2], ["config.json: must be a JSON object, not list"]),
    ({"num_hidden_layers": "2"}, ["config.json: key 'num_hidden_layers' must be a non-negative integer, not '2'"]),
    ({"text_config": {"hidden_size": 4.0}}, ["key 'text_config.hidden_size' must be a non-negative integer, not 4.0"]),
    ({"text_config": [1]}, ["key 'text_config' must be an object, not [1]"]),
    ({"num_attention_heads": True}, ["key 'num_attention_heads' must be a non-negative integer, not True"]),
    ({"quantization": "4bit"}, ["key 'quantization' must be an object, not '4bit'"]),
    ({"quantization": {"bits": 0, "group_size": 64}}, ["key 'quantization.bits' must be a positive integer, not 0"]),
    ({"quantization": {"bits": 4, "group_size": "64"}}, ["key 'quantization.group_size' must be a positive integer"]),
    ({"model_type": ["llama"]}, ["key 'model_type' must be a string, not ['llama']"]),
    ({"max_position_embeddings": -1}, ["key 'max_position_embeddings' must be a non-negative integer, not -1"]),
])
def test_mlx_config_values_of_the_wrong_type(tmp_path, cfg, parts):
    d = _mlx(tmp_path, cfg=cfg)
    _refused(d, *parts, named=d / "config.json")


def test_config_json_nested_past_the_stack(tmp_path):
    d = _mlx(tmp_path)
    (d / "config.json").write_text("[" * 100_000)
    with pytest.raises(MacprofError, match="config.json: invalid JSON \\(RecursionError"):
        modelinfo.inspect(d)


# -- 4. files are what they claim ------------------------------------------------------------
def _special(tmp_path, kind):
    p = tmp_path / f"{kind}.gguf"
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "dev-zero":
        p.symlink_to("/dev/zero")
    else:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        s.close()
    return p


KINDS = [("fifo", "(a FIFO)"), ("dev-zero", "(a symlink to /dev/zero, a character device)"), ("socket", "(a socket)")]


@pytest.mark.parametrize("kind,what", KINDS)
def test_inspect_refuses_what_is_not_a_regular_file(tmp_path, kind, what):
    p = _special(tmp_path, kind)
    # a subprocess with a timeout: a regression that blocks in open() fails instead of hanging the suite
    proc = subprocess.run([sys.executable, "-m", "macprof", "inspect", str(p)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and proc.stderr == f"macprof: error: {p}: not a regular file {what}\n"


@pytest.mark.parametrize("kind,what", KINDS)
def test_models_toml_refuses_what_is_not_a_regular_file(tmp_path, kind, what):
    p = _special(tmp_path, kind)
    cfg = tmp_path / "models.toml"
    cfg.write_text(f'[[models]]\nname = "m"\nengine = "llama.cpp"\npath = "{p}"\n')
    with pytest.raises(MacprofError) as err:
        config.load(cfg, check_engines=False)
    assert str(err.value) == f'{cfg}: models[0] ("m"): key \'path\': {p}: not a regular file {what}'


def test_mlx_directory_entries_must_be_regular_files(tmp_path):
    d = _mlx(tmp_path)
    os.mkfifo(d / "extra.safetensors")
    (d / "subfolder").mkdir()  # a directory is not part of the model: left out, not refused
    cfg = tmp_path / "models.toml"
    cfg.write_text(f'[[models]]\nname = "m"\nengine = "mlx"\npath = "{d}"\n')
    with pytest.raises(MacprofError, match="extra.safetensors: not a regular file \\(a FIFO\\)"):
        config.load(cfg, check_engines=False)
    with pytest.raises(MacprofError, match="extra.safetensors: not a regular file \\(a FIFO\\)"):
        modelinfo.inspect(d)
    (d / "extra.safetensors").unlink()
    (d / "tokenizer.json").symlink_to("/dev/zero")
    with pytest.raises(MacprofError, match="tokenizer.json: not a regular file \\(a symlink to /dev/zero"):
        modelinfo.inspect(d)


def test_a_file_that_became_a_fifo_after_the_config_was_read(tmp_path, monkeypatch):
    """Checked again before hashing: the model's refusal is recorded, nothing blocks."""
    monkeypatch.setenv("MACPROF_CACHE", str(tmp_path / "cache"))
    p = _written(tmp_path / "m.gguf", {})
    cfg = tmp_path / "models.toml"
    cfg.write_text(f'[[models]]\nname = "m"\nengine = "llama.cpp"\npath = "{p}"\n')
    (model,) = config.load(cfg, check_engines=False).models
    p.unlink()
    os.mkfifo(p)
    start = facts.model_start_event(model)
    assert start.files_error == f"{p}: not a regular file (a FIFO)" and start.shape is None
    with pytest.raises(MacprofError, match="not a regular file"):
        fileid.cached_sha256(p)


def test_open_never_blocks_on_a_fifo_that_slipped_past_the_stat(tmp_path, monkeypatch):
    fifo = tmp_path / "x"
    os.mkfifo(fifo)
    monkeypatch.setattr(filekind, "regular_stat", lambda path: None)  # as if it was swapped in just after
    with pytest.raises(MacprofError, match="not a regular file \\(a FIFO\\)"):
        filekind.open_regular(fifo)


# -- 3. end to end: a bad model is the model's recorded refusal, the good one is measured ----
def test_run_refuses_badly_typed_models_and_measures_the_good_one(fake_dir, tmp_path):
    from macprof.store import runlog
    from tests.test_run import FAULT_ARGS, macprof

    bad_gguf = _written(tmp_path / "bad.gguf", {"llama.embedding_length": ("string", "4096")})
    bad_mlx = _mlx(tmp_path, cfg={"model_type": "llama", "num_hidden_layers": "2"})
    cfg = tmp_path / "models.toml"
    cfg.write_text(f'[[models]]\nname = "bad-gguf"\nengine = "llama.cpp"\npath = "{bad_gguf}"\n\n'
                   f'[[models]]\nname = "bad-mlx"\nengine = "mlx"\npath = "{bad_mlx}"\n\n'
                   f'[[models]]\nname = "good"\nengine = "fake"\npath = "{fake_dir / "fake-a.gguf"}"\n')
    log = tmp_path / "run.json"
    proc = macprof("run", "--config", str(cfg), *FAULT_ARGS, "--log", str(log))
    assert "Traceback" not in proc.stdout + proc.stderr
    gguf_model, mlx_model, good = runlog.load(log).models
    (failure,) = gguf_model.failures
    assert failure.status == "refused"
    assert failure.reason == f"{bad_gguf}: GGUF key llama.embedding_length must be a non-negative integer, " \
                                f"not a string ('4096')"
    (failure,) = mlx_model.failures
    assert failure.reason == f"{bad_mlx / 'config.json'}: key 'num_hidden_layers' must be a non-negative integer, not '2'"
    assert len([r for r in good.phases.warm.requests if r.status == "ok"]) == 4
