"""The run's machinery names no phase (issue #39, item 1): what the parent does for a phase is the
phase's own (run/phases/api.py, its registry line), so the orchestrator, the worker's job, the
phase context, the worker and --resume hold no phase's name in their code (comments and
docstrings may say which phase does what), and import none of the modules a registry line names.
The issue's check is `grep -nwE "speculative|tasks|quality|conversation|draft|taskfile"` over the
orchestrator, the job and the common context; here it runs over their code alone, and every
phase's name over the rest."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from macprof.phases import NAMES, REGISTRY

ROOT = Path(__file__).resolve().parent.parent / "macprof"
ISSUE_WORDS = re.compile(r"\b(speculative|tasks|quality|conversation|draft|taskfile)\b")
ANY_PHASE = re.compile(r"\b(" + "|".join(NAMES) + r")\b")
# the issue's three (common.py's request fields include "batch", a request's size: the issue's words only)
ISSUE_FILES = ("run/orchestrator.py", "run/job.py", "run/phases/common.py")
BLIND = ("run/orchestrator.py", "run/job.py", "run/phases/context.py", "run/phases/api.py", "run/phases/__init__.py",
         "run/resume.py", "run/worker.py")


def code_lines(path: Path) -> dict[int, str]:
    """Each line's code: its tokens less comments and docstrings (a string that is a module's,
    a class's or a function's first statement)."""
    source = path.read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                docstrings.add((first.lineno, first.col_offset))
    out: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and tok.start in docstrings):
            continue
        out[tok.start[0]] = out.get(tok.start[0], "") + " " + tok.string
    return out


def test_code_lines_drop_comments_and_docstrings(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text('"""tasks"""\n\n\ndef f():\n    """draft"""\n    return "quality"  # speculative\n')
    assert [n for n, line in code_lines(sample).items() if ISSUE_WORDS.search(line)] == [6]


@pytest.mark.parametrize("name", ISSUE_FILES)
def test_the_issue_s_grep_finds_no_code_line(name):
    found = [f"{name}:{n}: {line.strip()}" for n, line in code_lines(ROOT / name).items() if ISSUE_WORDS.search(line)]
    assert found == []


@pytest.mark.parametrize("name", BLIND)
def test_the_run_s_machinery_names_no_phase(name):
    found = [f"{name}:{n}: {line.strip()}" for n, line in code_lines(ROOT / name).items() if ANY_PHASE.search(line)]
    assert found == []


# named by registry lines but no phase's own: the cases of every sweep (the plan, its margins) and
# the run log's builder (the builders of the phases written before builders were their own)
SHARED = {"macprof.cases", "macprof.analyse.build"}


def _named_modules() -> set[str]:
    """Every module a registry line names ("module:name" strings), less the shared ones."""
    out = set()
    for phase in REGISTRY.values():
        for value in vars(phase).values():
            if isinstance(value, str) and ":" in value and value.startswith("macprof."):
                out.add(value.partition(":")[0])
    return out - SHARED


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}  # `from macprof.run.phases import tasks`
    return out


@pytest.mark.parametrize("name", BLIND + ("run/phases/common.py",))
def test_the_run_s_machinery_imports_no_phase_s_module(name):
    named = _named_modules()
    assert {"macprof.run.phases.tasks", "macprof.run.phases.quality", "macprof.model.speculative"} <= named
    assert _imports(ROOT / name) & named == set()
