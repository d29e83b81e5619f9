"""The fault table: each broken model gives one clear reason naming the file, is recorded as
a failure of that model, and the other model of the run is still measured and saved."""

import json
import shutil
import struct

import pytest

from macprof import runlog
from tests.test_run import FAULT_ARGS, macprof


def _gguf(tiny_dir):
    return (tiny_dir / "gguf/demo-tiny-q8_0.gguf").read_bytes()


def _mlx(tiny_dir, dst):
    shutil.copytree(tiny_dir / "mlx/demo-tiny-f16", dst)
    return dst


def make_case(name, tiny_dir, tmp):
    """-> (engine, path) of a broken model."""
    g = tmp / "model.gguf"
    if name == "gguf truncated in header":
        g.write_bytes(_gguf(tiny_dir)[:100])
    elif name == "gguf truncated in tensor data":
        raw = _gguf(tiny_dir)
        g.write_bytes(raw[: int(len(raw) * 0.8)])
    elif name == "gguf wrong magic":
        g.write_bytes(b"GGUX" + _gguf(tiny_dir)[4:])
    elif name == "gguf unsupported version":
        raw = _gguf(tiny_dir)
        g.write_bytes(raw[:4] + struct.pack("<I", 99) + raw[8:])
    elif name == "gguf zero bytes":
        g.write_bytes(b"")
    elif name == "gguf that is a text file":
        g.write_text("just some notes\n" * 10)
    elif name == "gguf that is a safetensors file":
        g.write_bytes((tiny_dir / "mlx/demo-tiny-f16/model.safetensors").read_bytes())
    else:
        d = _mlx(tiny_dir, tmp / "mlxmodel")
        if name == "mlx without config.json":
            (d / "config.json").unlink()
        elif name == "mlx without weights":
            (d / "model.safetensors").unlink()
        elif name == "mlx unknown architecture":
            cfg = json.loads((d / "config.json").read_text())
            cfg["model_type"] = "no_such_architecture"
            (d / "config.json").write_text(json.dumps(cfg))
        elif name == "mlx corrupt safetensors header":
            raw = (d / "model.safetensors").read_bytes()
            (d / "model.safetensors").write_bytes(raw[:8] + b"{not json" + raw[17:])
        return "mlx", d
    return "llama.cpp", g


CASES = [
    ("gguf truncated in header", "model.gguf: truncated or corrupt GGUF file"),
    ("gguf truncated in tensor data", "model.gguf: truncated or corrupt GGUF file"),
    ("gguf wrong magic", "model.gguf: not a GGUF file (magic b'GGUX'"),
    ("gguf unsupported version", "model.gguf: unsupported GGUF version 99"),
    ("gguf zero bytes", "model.gguf: empty file (0 bytes)"),
    ("gguf that is a text file", "not a GGUF file"),
    ("gguf that is a safetensors file", "not a GGUF file"),
    ("mlx without config.json", "mlxmodel: not an MLX model directory (no config.json)"),
    ("mlx without weights", "mlxmodel: no *.safetensors weights"),
    ("mlx unknown architecture", "mlxmodel: mlx could not load the model: ValueError: Model type no_such_architecture"),
    ("mlx corrupt safetensors header", "corrupt safetensors header"),
]


@pytest.mark.parametrize("case,message", CASES, ids=[c[0] for c in CASES])
def test_broken_model(tiny_dir, tmp_path, case, message):
    engine, path = make_case(case, tiny_dir, tmp_path)
    cfg = tmp_path / "models.toml"
    cfg.write_text(f'[[models]]\nname = "broken"\nengine = "{engine}"\npath = "{path}"\n\n'
                   f'[[models]]\nname = "good"\nengine = "llama.cpp"\npath = "{tiny_dir / "gguf/demo-tiny-q8_0.gguf"}"\n')
    log = tmp_path / "run.json"
    proc = macprof("run", "--config", str(cfg), *FAULT_ARGS, "--log", str(log))
    assert "Traceback" not in proc.stdout + proc.stderr
    data = runlog.load(log)
    broken, good = data["models"]
    assert broken["failures"], case
    reason = broken["failures"][0]["reason"]
    assert message in reason and "\n" not in reason.strip(), reason
    assert len([r for r in good["phases"]["warm"]["requests"] if r["status"] == "ok"]) == 4
