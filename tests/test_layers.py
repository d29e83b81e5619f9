"""The layers as contracts (pyproject.toml [tool.importlinter], docs/design.md's Layout): the
import graph of macprof holds every contract, so a developer's pytest sees an upward import before
CI's `lint-imports` does; and the check is not vacuous: an upward import and an unplaced
top-level module planted in a copy of the package both break it, each named."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"


def test_the_import_graph_keeps_every_contract(capsys):
    status = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    out = capsys.readouterr().out
    assert status == 0, out  # the output names each broken contract and the import lines that break it
    contracts = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]["contracts"]
    assert f"Contracts: {len(contracts)} kept, 0 broken." in out


def test_design_quotes_the_layers_contract():
    """docs/design.md's Layout quotes the layers contract as pyproject.toml declares it, word for word."""
    text = PYPROJECT.read_text()
    start = text.index('[[tool.importlinter.contracts]]\nid = "layers"')
    block = text[start:text.index("[[tool.importlinter.contracts]]", start + 1)].rstrip()
    assert block in (ROOT / "docs" / "design.md").read_text(), "docs/design.md: quote pyproject.toml's layers contract again"


def test_an_upward_import_and_an_unplaced_module_break_the_contracts(tmp_path):
    """The same contracts over a copy of the package with an analyse module importing collect
    (upward: analyse and collect are siblings, and analyse is pure) and a new top-level module in
    no layer (the layers are exhaustive)."""
    copy = tmp_path / "macprof"
    shutil.copytree(ROOT / "macprof", copy, ignore=shutil.ignore_patterns("__pycache__", "data", "board_assets"))
    headline = copy / "analyse" / "headline.py"
    headline.write_text(headline.read_text() + "\nfrom macprof.collect import system  # noqa: E402,F401\n")
    (copy / "stray.py").write_text('"""placed in no layer"""\n')
    shutil.copy(PYPROJECT, tmp_path / "pyproject.toml")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}  # the copy, ahead of the installed package
    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "macprof's layers, top to bottom BROKEN" in out.stdout
    assert "analyse, render and measure do no I/O of their own BROKEN" in out.stdout
    assert "macprof.analyse.headline -> macprof.collect.system" in out.stdout
    assert "macprof.stray" in out.stdout  # the module in no layer, named
