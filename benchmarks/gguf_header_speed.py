"""How long `macprof inspect` takes on GGUF headers that are large for the wrong reasons: a
262,144-token vocabulary (Gemma 3) and 200,000 tensors. The target: under 0.5 s for the
vocabulary, a few seconds for the tensors. Speed is measured here, never in a unit test.

The files are generated (gguf.GGUFWriter writes the header, the tensor data is a sparse hole),
each measurement runs in a fresh process so its peak memory is its own:

    python benchmarks/gguf_header_speed.py [--dir DIR] [--gguf-reader] [--json]

--gguf-reader also times gguf.GGUFReader on the same files (what modelinfo used before).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

VOCAB = 262_144
TENSORS = 200_000

MEASURE = r"""
import json, resource, sys, time
what, path = sys.argv[1], sys.argv[2]
import gguf  # imported before the clock starts: only the reading is timed
from macprof.collect.modelinfo import inspect
t = time.perf_counter()
if what == "macprof":
    info = inspect(path)
    detail = {"n_params": info.n_params, "vocab_size": info.vocab_size, "tensor_bytes": info.tensor_bytes}
else:
    reader = gguf.GGUFReader(path, "r")
    detail = {"tensors": len(reader.tensors)}
seconds = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rss_mib = rss / 2**20 if sys.platform == "darwin" else rss / 1024
print(json.dumps({"seconds": seconds, "peak_rss_mib": rss_mib, **detail}))
"""


def _finish(writer, path: Path, data_bytes: int) -> None:
    """Header, key/values and tensor table; then the data region as a hole of the right size."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    size = path.stat().st_size
    start = size + (-size % 32)
    os.truncate(path, start + data_bytes)


def make_vocab_file(path: Path) -> None:
    """A Gemma-3-like header: 262,144 tokens with scores and types, 26 layers of tensors."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "gemma3")
    for key, value in (("block_count", 26), ("embedding_length", 1152), ("context_length", 32768),
                       ("attention.head_count", 4), ("attention.head_count_kv", 1), ("attention.key_length", 256),
                       ("attention.value_length", 256), ("feed_forward_length", 6912)):
        w.add_uint32(f"gemma3.{key}", value)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"tok_{i:06d}_\u2581piece" for i in range(VOCAB)])
    w.add_token_scores([float(-i) for i in range(VOCAB)])
    w.add_token_types([1] * VOCAB)
    w.add_chat_template("{{ bos_token }}" + "{% for m in messages %}{{ m['content'] }}{% endfor %}" * 50)
    total = 0

    def tensor(name, shape, qtype):
        nonlocal total
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        nbytes = int(np.prod(shape)) * size // block
        w.add_tensor_info(name, shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        total += nbytes + (-nbytes % 32)

    q8, f32 = gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.F32
    tensor("token_embd.weight", (VOCAB, 1152), q8)
    for i in range(26):
        for part, shape in (("attn_q", (1024, 1152)), ("attn_k", (256, 1152)), ("attn_v", (256, 1152)),
                            ("attn_output", (1152, 1024)), ("ffn_gate", (6912, 1152)), ("ffn_up", (6912, 1152)),
                            ("ffn_down", (1152, 6912))):
            tensor(f"blk.{i}.{part}.weight", shape, q8)
        tensor(f"blk.{i}.attn_norm.weight", (1152,), f32)
    _finish(w, path, total)


def make_many_tensors_file(path: Path) -> None:
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(TENSORS // 8)
    w.add_embedding_length(16)
    w.add_head_count(2)
    for i in range(TENSORS):
        w.add_tensor_info(f"blk.{i // 8}.t{i % 8}.weight", (16,), np.dtype(np.float32), 64)
    _finish(w, path, TENSORS * 64)


def measure(what: str, path: Path) -> dict:
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run([sys.executable, "-c", MEASURE, what, str(path)], capture_output=True, text=True,
                          env=env, timeout=600, check=False)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, help="Where to write the generated files [a temporary folder].")
    ap.add_argument("--gguf-reader", action="store_true", help="Also time gguf.GGUFReader (the reader before).")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.dir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        files = {"vocab_262144": (root / "vocab.gguf", make_vocab_file, 0.5),
                 "tensors_200000": (root / "tensors.gguf", make_many_tensors_file, 5.0)}
        results = {}
        for name, (path, make, target_s) in files.items():
            if not path.exists():
                make(path)
            results[name] = {"header_bytes_file": path.stat().st_size, "target_s": target_s,
                             "macprof": measure("macprof", path)}
            if args.gguf_reader:
                results[name]["gguf_reader"] = measure("gguf", path)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    for name, r in results.items():
        for who in ("macprof", "gguf_reader"):
            if who in r:
                m = r[who]
                line = m.get("error") or f"{m['seconds']:.3f} s, peak RSS {m['peak_rss_mib']:.0f} MiB"
                print(f"{name:16s} {who:12s} {line}" + (f"   (target < {r['target_s']} s)" if who == "macprof" else ""))


if __name__ == "__main__":
    main()
