"""The demo models: deterministic (here and on another machine), complete, and a second build
is a no-op."""

import json
import os

import pytest
from click.testing import CliRunner

from macprof.cli import main
from macprof.demo.build import SPECS, VARIANTS, build, is_intact, parameter_count
from macprof.collect.modelinfo import inspect
from macprof.files.fileid import sha256_file
from macprof.store import runlog
from tests.conftest import ALL_VARIANTS, FIXTURES

pytestmark = pytest.mark.slow  # building the demo models runs llama.cpp's and mlx-lm's quantizers


def _hashes(root):
    return {str(p.relative_to(root)): sha256_file(p) for p in sorted(root.rglob("*"))
            if p.is_file() and "manifest" not in p.name}


def test_bit_identical_across_builds(tiny_dir, tmp_path):
    other = build("tiny", tmp_path / "again")
    a, b = _hashes(tiny_dir), _hashes(other)
    assert a.keys() == b.keys()
    differing = sorted(k for k in a if a[k] != b[k])
    assert differing == [], differing  # llama.cpp's and mlx-lm's quantizers are deterministic here too


def test_six_models_listed(tiny_dir):
    text = (tiny_dir / "models.toml").read_text()
    for _, name, rel in ALL_VARIANTS:
        assert f'name = "demo-tiny-{name}"' in text and f'path = "{rel}"' in text
        assert (tiny_dir / rel).exists()


def test_same_weights_everywhere(tiny_dir):
    expected = parameter_count(SPECS["tiny"])
    for _, _, rel in ALL_VARIANTS:
        info = inspect(tiny_dir / rel)
        assert info.n_params == expected, rel
        assert info.vocab_size == SPECS["tiny"].vocab_size and info.n_layers == SPECS["tiny"].layers


def test_second_build_is_a_noop(tiny_dir):
    stamps = {p: p.stat().st_mtime_ns for p in tiny_dir.rglob("*") if p.is_file()}
    result = CliRunner().invoke(main, ["demo", "--size", "tiny", "--dir", str(tiny_dir)])
    assert result.exit_code == 0, result.output
    assert "already built" in result.output
    assert {p: p.stat().st_mtime_ns for p in tiny_dir.rglob("*") if p.is_file()} == stamps


def test_damaged_build_is_rebuilt(tiny_dir, tmp_path):
    root = build("tiny", tmp_path / "damaged")
    victim = root / "gguf" / "demo-tiny-q8_0.gguf"
    victim.write_bytes(victim.read_bytes()[:1000])
    assert not is_intact(root, "tiny")
    build("tiny", root)
    assert is_intact(root, "tiny")
    manifest = json.loads((root / "demo-tiny.manifest.json").read_text())
    assert sha256_file(victim) == manifest["files"][os.path.join("gguf", "demo-tiny-q8_0.gguf")]


@pytest.mark.slow
def test_bit_identical_with_another_machine(tmp_path):
    """The small demo models built here are, file by file, the ones a run on another machine
    recorded (identity.files of tests/fixtures/runlogs/other-machine-demo-small.json)."""
    other = runlog.load(FIXTURES / "runlogs" / "other-machine-demo-small.json")
    recorded = {m.identity.name: m.identity.files for m in other.models}
    assert sorted(recorded) == sorted(f"demo-small-{suffix}" for suffix, *_ in VARIANTS)
    root = build("small", tmp_path / "demo")
    for suffix, _, rel, _ in VARIANTS:
        path = root / rel.format(size="small")
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        here = {str(f.relative_to(path)) if path.is_dir() else f.name: (f.stat().st_size, sha256_file(f))
                for f in files}
        there = {f.name: (f.bytes, f.sha256) for f in recorded[f"demo-small-{suffix}"]}
        assert here == there, suffix
