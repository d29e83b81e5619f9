"""The headline memory figure: the macOS physical footprint where a log recorded one (it counts
GPU allocations, RSS does not), RSS elsewhere; each table names which, `compare` refuses a
footprint against an RSS, and `--fail-if memory:` says which figure it judged. The footprint
logs are the recorded tiny-a / tiny-b runs with footprint fields added through the typed model."""

import json
from pathlib import Path

from click.testing import CliRunner

from macprof.analyse.headline import memory_figures
from macprof.cli import main
from macprof.model.log import RunLog
from macprof.model.phases import PhaseMemory
from macprof.render.detail import render_detail
from macprof.render.summary import summary_table
from macprof.render.exporters import to_json, to_text
from macprof.store import runlog
from tests.conftest import FIXTURES

LOGS = FIXTURES / "runlogs"
A, B = LOGS / "tiny-a.json", LOGS / "tiny-b.json"
GPU = 3  # the footprint here: the phase's RSS x 3 (as on Metal, where the weights are GPU buffers)


def _footprinted(mem: PhaseMemory | None, scale: float) -> PhaseMemory | None:
    if mem is None or not mem.peak_rss_bytes:
        return mem
    return mem.replace(footprint_start_bytes=mem.rss_start_bytes, footprint_end_bytes=mem.rss_end_bytes,
                       peak_footprint_bytes=int(mem.peak_rss_bytes * GPU * scale), footprint_samples=7)


def with_footprint(src: Path, dst: Path, scale: float = 1.0) -> Path:
    """``src`` as a macOS worker would have recorded it: every phase's memory with a footprint."""
    log = runlog.load(src)
    models = []
    for m in log.models:
        ph = m.phases
        phases = ph.replace(**{name: p.replace(memory=_footprinted(p.memory, scale))
                               for name, p in (("warm", ph.warm), ("prefix", ph.prefix)) if p})
        models.append(m.replace(phases=phases))
    runlog.save(log.replace(models=tuple(models)), dst)
    runlog.load(dst)  # valid against the schema
    return dst


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _peaks(log: RunLog, field: str) -> list[int]:
    return [max(getattr(p.memory, field) for p in (m.phases.warm, m.phases.prefix) if p and p.memory)
            for m in log.models]


def test_summary_and_show_headline_the_footprint_where_the_log_has_it(tmp_path):
    path = with_footprint(A, tmp_path / "mac.json")
    log = runlog.load(path)
    table = summary_table(log)
    text = to_text(table)
    assert "peak footprint" in text and "peak RSS" not in text.splitlines()[0]
    rows = json.loads(to_json(table))["rows"]
    assert [r["memory_figure"] for r in rows] == ["footprint"] * len(log.models)
    assert [r["peak_memory_bytes"] for r in rows] == [r["peak_footprint_bytes"] for r in rows] == \
        _peaks(log, "peak_footprint_bytes")
    assert [r["peak_rss_bytes"] for r in rows] == _peaks(log, "peak_rss_bytes")  # still carried
    detail = render_detail(log)
    assert "warm memory: peak footprint" in detail and "(peak RSS " in detail
    # a Linux log: RSS, named so
    plain = summary_table(runlog.load(A))
    assert "peak RSS" in to_text(plain).splitlines()[0]
    assert {r["memory_figure"] for r in json.loads(to_json(plain))["rows"]} == {"RSS"}
    assert "warm memory: peak RSS" in render_detail(runlog.load(A))


def test_a_log_that_recorded_a_footprint_never_falls_back_to_rss():
    lost = PhaseMemory(peak_rss_bytes=100, peak_footprint_bytes=None)  # the footprint's peak was not taken
    assert memory_figures([lost]) == {"peak_memory_bytes": None, "memory_figure": "footprint",
                                      "peak_rss_bytes": 100, "peak_footprint_bytes": None, "mapped_weights_bytes": None,
                                      "weights_held": None, "memory_weights": "counted"}
    assert memory_figures([PhaseMemory(peak_rss_bytes=100)])["memory_figure"] == "RSS"
    assert memory_figures([])["memory_figure"] is None


def test_compare_and_the_gate_judge_footprints_and_say_so(tmp_path):
    a = with_footprint(A, tmp_path / "mac-a.json")
    b = with_footprint(B, tmp_path / "mac-b.json", scale=1.5)  # the same runs' RSS, footprints half as big again
    r = run("compare", a, b, "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert {row["memory_figure"] for row in doc["rows"]} == {"footprint"}
    assert not any("footprint vs RSS" in flag for row in doc["rows"] for flag in row["not_comparable"])
    assert "peak footprint" in run("compare", a, b).stdout
    r = run("compare", a, b, "--fail-if", "memory:+20%")
    assert r.exit_code == 1, r.output
    assert "demo-tiny-q8_0@mac-b: peak footprint +" in r.output and "peak RSS" not in r.stderr


def test_compare_refuses_a_footprint_against_an_rss(tmp_path):
    mac = with_footprint(B, tmp_path / "mac-b.json")
    doc = json.loads(run("compare", A, mac, "--format", "json").stdout)
    mixed = [row for row in doc["rows"] if row["run"] == "mac-b"]
    assert mixed and all("memory: footprint vs RSS" in row["not_comparable"] for row in mixed)
    assert all(row["memory_vs_base"] is None for row in mixed)
    text = run("compare", A, mac).stdout
    assert "peak memory" in text and "(footprint)" in text and "(RSS)" in text  # each cell says which
    r = run("compare", A, mac, "--fail-if", "memory:+10%")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "not comparable, footprint vs RSS" in r.stderr
    assert "demo-tiny-q8_0@mac-b (peak footprint) against demo-tiny-q8_0@tiny-a (peak RSS)" in r.stderr


# -- mapped weights: what xnu's footprint leaves out (analyse/headline.py) ----------------------
MIB = 1 << 20


def test_mapped_weights_are_added_to_the_footprint_and_copied_ones_are_not():
    mapped = PhaseMemory(peak_rss_bytes=900 * MIB, peak_footprint_bytes=300 * MIB, weights_held="mapped",
                         mapped_resident_bytes=4900 * MIB)
    head = memory_figures([mapped], "llama.cpp")
    assert head["memory_figure"] == "footprint+mapped" and head["memory_weights"] == "counted"
    assert head["peak_memory_bytes"] == (300 + 4900) * MIB  # disjoint: no file page is in a footprint
    assert head["peak_footprint_bytes"] == 300 * MIB and head["mapped_weights_bytes"] == 4900 * MIB
    copied = PhaseMemory(peak_rss_bytes=900 * MIB, peak_footprint_bytes=5300 * MIB, weights_held="copied")
    head = memory_figures([copied], "mlx")
    assert head["peak_memory_bytes"] == 5300 * MIB and head["memory_weights"] == "counted"
    assert head["memory_figure"] == "footprint+mapped" and head["mapped_weights_bytes"] is None
    # mapped, residency unknown: the footprint alone, said not to count the weights
    unknown = mapped.replace(mapped_resident_bytes=None)
    head = memory_figures([unknown], "llama.cpp")
    assert head["peak_memory_bytes"] == 300 * MIB and head["memory_weights"].startswith("not counted")
    # an older macOS log (no weights_held): macprof's llama.cpp adapter mapped, MLX copied
    old = PhaseMemory(peak_rss_bytes=900 * MIB, peak_footprint_bytes=300 * MIB)
    assert memory_figures([old], "llama.cpp")["memory_weights"].startswith("not counted")
    assert memory_figures([old], "mlx")["memory_weights"] == "counted"
    # Linux: RSS counts the mapped pages the process touched (RssFile), nothing is added
    linux = PhaseMemory(peak_rss_bytes=900 * MIB, weights_held="mapped", mapped_resident_bytes=800 * MIB)
    head = memory_figures([linux], "llama.cpp")
    assert head["memory_figure"] == "RSS" and head["peak_memory_bytes"] == 900 * MIB and head["memory_weights"] == "counted"


def _held(src: Path, dst: Path, held: str, resident: int | None) -> Path:
    """``src`` with footprints, as a macOS worker of this version records it: how the weights
    were held and, mapped, their resident bytes."""
    with_footprint(src, dst)
    log = runlog.load(dst)
    models = []
    for m in log.models:
        ph = m.phases
        extra = {"weights_held": held, **({"mapped_resident_bytes": resident} if held == "mapped" else {})}
        models.append(m.replace(phases=ph.replace(**{name: p.replace(memory=p.memory.replace(**extra))
                                                     for name, p in (("warm", ph.warm), ("prefix", ph.prefix))
                                                     if p and p.memory})))
    runlog.save(log.replace(models=tuple(models)), dst)
    runlog.load(dst)  # valid against the schema
    return dst


def test_compare_flags_a_footprint_that_missed_mapped_weights_against_one_that_counts_them(tmp_path):
    old = with_footprint(A, tmp_path / "old-mac.json")  # llama.cpp, before mapped weights were measured
    new = _held(B, tmp_path / "new-mac.json", "copied", None)  # weights counted by the footprint
    doc = json.loads(run("compare", old, new, "--format", "json").stdout)
    flagged = [row for row in doc["rows"] if row["run"] == "new-mac"]
    assert flagged and all(any("weights counted on one side only" in f for f in row["not_comparable"]) for row in flagged)
    assert all(row["memory_vs_base"] is None for row in flagged)
    r = run("compare", old, new, "--fail-if", "memory:+10%")
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "the weights counted on one side only" in r.stderr
    # both sides count their weights (mapped and measured, copied): compared, nothing flagged
    mapped = _held(A, tmp_path / "mapped-mac.json", "mapped", 4 * MIB)
    doc = json.loads(run("compare", mapped, new, "--format", "json").stdout)
    assert not any("weights" in f for row in doc["rows"] for f in row["not_comparable"])
    assert all(row["memory_vs_base"] is not None for row in doc["rows"] if row["run"] == "new-mac")
    # two older logs: their llama.cpp footprints missed the weights alike, and are still compared
    # with each other; their MLX footprints (copied weights) against the llama.cpp baseline are
    # flagged: that was the fraction-of-MLX's-memory comparison no one was told about
    other = with_footprint(B, tmp_path / "old-mac-b.json")
    doc = json.loads(run("compare", old, other, "--format", "json").stdout)
    weights = {(row["run"], row["model"]): any("weights" in f for f in row["not_comparable"]) for row in doc["rows"]}
    assert weights and all(flag == ("mlx" in model) for (_, model), flag in weights.items())
    llama = [row for row in doc["rows"] if row["run"] == "old-mac-b" and "mlx" not in row["model"]]
    assert llama and all(row["memory_vs_base"] is not None for row in llama)


def test_show_splits_the_headline_into_footprint_and_mapped_weights(tmp_path):
    log = runlog.load(_held(A, tmp_path / "mapped-mac.json", "mapped", 4 * MIB))
    detail = render_detail(log)
    assert "warm memory: peak footprint+mapped" in detail and "+ mapped weights 4.0 MiB resident" in detail
    text = to_text(summary_table(log))
    assert "peak footprint+mapped" in text.splitlines()[0]


def test_the_headline_counts_every_phase_that_holds_the_loaded_model():
    """A conversation-only run's headline was "-" though the phase recorded its peak: every phase
    whose worker holds the loaded model counts (design.md's Memory rule), a cold trial's fresh
    process does not."""
    from macprof.analyse.headline import headline
    from macprof.model.conversation import ConversationPhase
    from macprof.model.quality import QualityPhase
    from macprof.model.records import ABSENT
    from macprof.model.tasks import TasksPhase

    MiB = 1 << 20
    m = runlog.load(A).models[0]
    only = m.replace(phases=m.phases.replace(
        cold=m.phases.cold, warm=ABSENT, prefix=ABSENT,
        conversation=ConversationPhase(memory=PhaseMemory(peak_rss_bytes=216 * MiB))))
    assert headline(only)["peak_memory_bytes"] == 216 * MiB and headline(only)["memory_figure"] == "RSS"
    more = only.replace(phases=only.phases.replace(quality=QualityPhase(memory=PhaseMemory(peak_rss_bytes=300 * MiB)),
                                                   tasks=TasksPhase(memory=PhaseMemory(peak_rss_bytes=250 * MiB))))
    assert headline(more)["peak_memory_bytes"] == 300 * MiB
    assert "216.0 MiB" in to_text(summary_table(runlog.load(A).replace(models=(only,))))
