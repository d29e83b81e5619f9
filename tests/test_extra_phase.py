"""A phase is its own modules and one registry line (issue #39, item 1): a copy of the package
gains a phase, "probe", written as four new modules (its records and event; its protocol and
parent side; its builder and compare figures; its report, with a show section and a plot panel)
and ONE line added to macprof/phases.py's REGISTRY; the schema is regenerated there (a derived
file). Run through `macprof run` (session -> Runner -> workers) on the fake engine, the copy
prepares the phase once per model (its record journaled in the plan), hands it to the workers,
journals its event, builds its record into the log, and compare, show and plot carry it; and the
copy differs from the package by those files alone."""

from __future__ import annotations

import difflib
import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "macprof"

NEW_FILES = {
    "model/probe.py": '''
"""The probe phase's records and its journal event."""

from __future__ import annotations

from macprof.model.event_base import Event
from macprof.model.kind import TEXT
from macprof.model.phases import Request
from macprof.model.records import Number, Record


class ProbePrepared(Record):
    """What the probe's parent prepares for a model, once."""

    KINDS = {"word": TEXT}
    word: str


class ProbeNote(Event):
    KIND = "probe_note"
    phase: str
    word: str
    requests: int


class ProbePhase(Record):
    KINDS = {"word": TEXT}
    requests: tuple[Request, ...] = ()
    word: str | None = None  # what its workers were handed
    decode_tok_s: Number | None = None


EVENTS = (ProbeNote,)
''',
    "run/phases/probe.py": '''
"""probe: a warm-up and --reps requests, then a note of what the parent prepared."""

from __future__ import annotations

from macprof.model.probe import ProbeNote, ProbePrepared
from macprof.run.phases.api import Parent
from macprof.run.phases.common import PhaseContext, announced, timed_request, warm_prompts


def run_probe(ctx: PhaseContext) -> None:
    s, engine = ctx.settings, ctx.engine
    prepared: ProbePrepared = ctx.prepared
    for i, prompt in enumerate(warm_prompts(ctx.builder, "probe", s.prompt_tokens, s.reps)):
        engine.reset()
        announced(ctx.emit, {"phase": "probe", "index": i - 1, "kind": "warmup" if i == 0 else "measured"},
                  lambda prompt=prompt: timed_request(engine, prompt, s.gen_tokens, ctx.clock))
    ctx.emit(ProbeNote(phase="probe", word=prepared.word, requests=s.reps + 1))


class ProbeParent(Parent[ProbePrepared, ProbePrepared]):
    plan_type = ProbePrepared

    def prepare(self, model) -> ProbePrepared:
        return ProbePrepared(word=f"prepared for {model.name}")
''',
    "analyse/probe.py": '''
"""The probe phase's record and compare figures."""

from __future__ import annotations

from macprof.analyse.requests import request_record, summarize_requests
from macprof.model import events as ev
from macprof.model.probe import ProbeNote, ProbePhase


def build_probe_phase(ctx, name: str) -> ProbePhase:
    requests = [request_record(e) for e in ctx.events if isinstance(e, ev.Request) and e.phase == name]
    note = next((e for e in ctx.events if isinstance(e, ProbeNote)), None)
    summary = summarize_requests([r for r in requests if r.kind == "measured"])
    return ProbePhase(requests=tuple(requests), word=note.word if note else None,
                      decode_tok_s=summary.decode_tok_s.median)


def figures(m) -> dict:
    ph = m.phases.get("probe")
    return {"has_probe": ph is not None, "probe_requests": len(ph.requests) if ph else None}
''',
    "render/probe.py": '''
"""What the probe phase adds to compare, the summary, show and plot."""

from __future__ import annotations

from macprof.render.exporters import Column, cell
from macprof.render.report import PhaseReport, Section


def section(log):
    words = [m.phases.get("probe").word for m in log.models if m.phases.get("probe")]
    return Section("Probe", None, tuple(f"workers were handed: {w}" for w in words)) if words else None


def panel(charted):
    rows = [r for r in charted.rows if r.get("has_probe")]
    if not rows:
        return None

    def draw(ax) -> None:
        ax.bar(range(len(rows)), [r["probe_requests"] for r in rows])
        ax.set_title("Probe requests per model")

    return draw


REPORT = PhaseReport(present="has_probe", columns=(Column("probe requests", cell("probe_requests")),),
                     fields=("probe_requests",), note="probe: a phase added by its own modules",
                     section=section, detail=lambda record: [f"   probe: {len(record.requests)} requests"],
                     panel=panel, parameters=lambda s: f"{s.reps} probes after a warm-up")
''',
}
REGISTRY_LINE = (
    '    Phase("probe", "macprof.run.phases.probe:run_probe", "macprof.analyse.probe:build_probe_phase", '
    'requests=lambda s, cases: s.reps + 1, figures="macprof.analyse.probe:figures", '
    'report="macprof.render.probe:REPORT", parent="macprof.run.phases.probe:ProbeParent", '
    'prepared="macprof.model.probe:ProbePrepared", events="macprof.model.probe:EVENTS", '
    'record="macprof.model.probe:ProbePhase"),\n')
SCHEMA = "store/schema/runlog.schema.json"

CHECK = '''
import json, sys
from pathlib import Path

import matplotlib
matplotlib.rcParams["svg.fonttype"] = "none"  # the panel's title as text in the SVG

import macprof
from macprof import config
from macprof.render.plot import plot
from macprof.run.phases import planned_requests
from macprof.store import runlog

log = Path(sys.argv[1])
plot([("run", runlog.load(log))], log.with_suffix(".svg"))
s = config.Settings(phases=("warm", "probe"), reps=2)
print(json.dumps({"package": macprof.__file__, "planned": planned_requests(s),
                  "svg": log.with_suffix(".svg").read_text()}))
'''


def _copy(tmp_path: Path) -> Path:
    """The package copied, the probe's modules written into it, its one registry line added."""
    root = tmp_path / "src"
    shutil.copytree(PACKAGE, root / "macprof", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name, text in NEW_FILES.items():
        (root / "macprof" / name).write_text(text.lstrip())
    phases = root / "macprof" / "phases.py"
    text = phases.read_text()
    end = text.index(")}\n", text.index("REGISTRY: dict[str, Phase]"))
    phases.write_text(text[:end] + REGISTRY_LINE + text[end:])
    return root


def _run(root: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}  # the copy, not the package this test is in
    proc = subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(args)}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _changed(root: Path) -> dict[str, str]:
    """Each file of the copy that the package lacks ("new") or holds otherwise ("changed")."""
    out: dict[str, str] = {}
    for path in sorted((root / "macprof").rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts:
            continue
        name = path.relative_to(root / "macprof").as_posix()
        original = PACKAGE / name
        if not original.exists():
            out[name] = "new"
        elif not filecmp.cmp(path, original, shallow=False):
            out[name] = "changed"
    return out


def test_a_phase_is_its_own_modules_and_one_registry_line(tmp_path, fake_dir):
    root = _copy(tmp_path)
    _run(root, tmp_path, "-m", "macprof.store.schema")  # the derived file, regenerated as the docs say
    log = tmp_path / "run.json"
    run = _run(root, tmp_path, "-m", "macprof", "run", "--config", str(fake_dir / "models.toml"), "--models",
               "fake-a,fake-b", "--phases", "warm,probe", "--reps", "2", "--prompt-tokens", "16", "--gen-tokens", "4",
               "--log", str(log))
    checked = json.loads(_run(root, tmp_path, "-c", CHECK, str(log)).stdout)
    assert checked["package"].startswith(str(root))  # the copy ran, workers included (they record no path)

    data = json.loads(log.read_text())
    assert data["complete"]
    for m in data["models"]:
        probe = m["phases"]["probe"]
        assert probe["word"] == f"prepared for {m['identity']['name']}"  # prepared by the parent, handed to the worker
        assert [r["kind"] for r in probe["requests"]] == ["warmup", "measured", "measured"]
        assert all(r["status"] == "ok" for r in probe["requests"]) and probe["decode_tok_s"] > 0
        assert not m["failures"]
    journal = [json.loads(x) for x in log.with_name("run.journal.jsonl").read_text().splitlines()]
    plans = {e["model"]: e for e in journal if e["event"] == "plan"}
    assert {name: p["prepared"] for name, p in plans.items()} == {
        n: {"probe": {"word": f"prepared for {n}"}} for n in ("fake-a", "fake-b")}
    assert [e["word"] for e in journal if e["event"] == "probe_note"] == ["prepared for fake-a", "prepared for fake-b"]
    # the progress display's total is what the protocols emit, and a request line counts to --reps
    requests = [e for e in journal if e["event"] == "request"]
    assert len(requests) == 2 * checked["planned"] == 2 * (3 + 3)
    assert "fake-a: probe 2/2: ok" in run.stderr and "fake-b: probe warmup: ok" in run.stderr

    compare = _run(root, tmp_path, "-m", "macprof", "compare", str(log), "--format", "json").stdout
    assert [r["probe_requests"] for r in json.loads(compare)["rows"]] == [3, 3]
    assert "probe requests" in _run(root, tmp_path, "-m", "macprof", "compare", str(log)).stdout
    show = _run(root, tmp_path, "-m", "macprof", "show", str(log)).stdout
    assert "Probe:" in show and "workers were handed: prepared for fake-b" in show and "probe: 3 requests" in show
    assert "Probe requests per model" in checked["svg"] and "probe 2 probes after a warm-up" in checked["svg"]
    # verify builds its record again from its requests (no reader of its own: analyse/unbuild.py reader)
    verified = _run(root, tmp_path, "-m", "macprof", "verify", str(log)).stdout
    assert "does not verify" not in verified and "verifies" in verified

    changed = _changed(root)
    assert changed == {**dict.fromkeys(NEW_FILES, "new"), "phases.py": "changed", SCHEMA: "changed"}
    diff = [line for line in difflib.unified_diff((PACKAGE / "phases.py").read_text().splitlines(),
                                                  (root / "macprof" / "phases.py").read_text().splitlines(), n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert diff == ["+" + REGISTRY_LINE.rstrip("\n")]
