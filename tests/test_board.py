"""The board page (`macprof board`, render/board.py): the database's rows embedded whole, grouped
with their spread over runs, marked for the conditions they ran under; text from a log is only
ever text; nothing comes from the network; and, where Debian's chromium is installed, the table
the page's own script builds, read from the DOM after sorting and filtering."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlencode

import pytest

from macprof.analyse.ceilings import roofline_for
from macprof.cases import mean_context
from macprof.measure.stats import median
from macprof.model.log import RunLog
from macprof.render import board
from macprof.render.text import fmt_pct, fmt_rate
from macprof.store import database, runlog
from tests.conftest import FIXTURES, cli

LOGS = FIXTURES / "runlogs"
OTHER = LOGS / "other-machine-demo-small.json"
ROOT = FIXTURES.parent.parent
HOSTILE = "</script><script>alert(1)</script>"


def _copies(folder: Path, n: int) -> list[Path]:
    """n distinct runs of the recorded default run, as benchmarks/many_logs.py makes them."""
    spec = importlib.util.spec_from_file_location("many_logs", ROOT / "benchmarks" / "many_logs.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    folder.mkdir(parents=True, exist_ok=True)
    return bench.write_logs(OTHER, folder, n)


def on_a_mac(path: Path, out: Path, *, chip="Apple M4 Max", gpu_cores=40, spec_gbs=546.0, started=None,
             **machine) -> Path:
    """The log at ``path`` as if run on an Apple Silicon Mac: its machine and published bandwidth,
    and the warm and prefix ceilings recomputed with them (analyse/ceilings.py), saved as run saves."""
    data = runlog.load(path).to_json()
    data["machine"].update(chip=chip, gpu_cores=gpu_cores, os="Darwin", os_version="15.5", arch="arm64",
                           cpu_model=chip, **machine)
    data["machine"]["unknown"] = {}
    data["bandwidth"]["spec"] = {"gbs": spec_gbs, "source": "Apple", "reason": None}
    if started:
        data["started_utc"] = started
    log = RunLog.from_json(data)
    models = []
    for m in log.models:
        s = m.settings
        roof = lambda summary: roofline_for(summary, m.shape, mean_context(s.prompt_tokens, s.gen_tokens),  # noqa: E731
                                            log.bandwidth, m.identity.total_bytes)
        ph = m.phases.replace(warm=m.phases.warm.replace(roofline=roof(m.phases.warm.summary)))
        if ph.prefix:
            ph = ph.replace(prefix=ph.prefix.replace(roofline=roof(ph.prefix.summary.reuse)))
        models.append(m.replace(phases=ph))
    runlog.save(log.replace(models=tuple(models)), out)
    return out


class _Page(HTMLParser):
    """A page's scripts, every start tag, and its table's body rows as {column: main text}."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.scripts: list[tuple[dict, str]] = []
        self.tags: list[tuple[str, dict]] = []
        self.rows: list[dict] = []
        self._script: dict | None = None
        self._text: list[str] = []
        self._cell: str | None = None
        self._main = False
        self._in_body = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "script":
            self._script, self._text = a, []
        elif tag == "tbody":
            self._in_body = True
        elif tag == "tr" and self._in_body:
            self.rows.append({})
        elif tag == "td" and self._in_body:
            self._cell = a.get("data-col")
            self.rows[-1][self._cell] = ""
        elif tag == "div" and self._cell and a.get("class") == "main":
            self._main = True
        elif tag == "span" and self._cell == "marks":
            self.rows[-1]["marks"] += "|"

    def handle_endtag(self, tag):
        if tag == "script" and self._script is not None:
            self.scripts.append((self._script, "".join(self._text)))
            self._script = None
        elif tag == "div":
            self._main = False
        elif tag == "td":
            self._cell = None
        elif tag == "tbody":
            self._in_body = False

    def handle_data(self, data):
        if self._script is not None:
            self._text.append(data)
        elif self._cell and (self._main or self._cell == "marks"):
            self.rows[-1][self._cell] += data


def _data(page: _Page) -> dict:
    found = [text for attrs, text in page.scripts if attrs.get("type") == "application/json"]
    assert len(found) == 1
    return json.loads(found[0])


def embedded_rows(data: dict) -> list[dict]:
    """The rows the page carries: each group's key columns with each of its runs."""
    rows = [{**dict(zip(data["key_columns"], g["key"])), **dict(zip(data["run_columns"], run))}
            for g in data["groups"] for run in g["runs"]]
    return sorted(rows, key=lambda r: r["result_id"])


def _board(tmp_path: Path, *paths, name="board.html") -> tuple[_Page, dict, Path]:
    out = tmp_path / name
    done = cli("board", *paths, "-o", out)
    assert done.exit_code == 0, done.output
    page = _Page(out.read_text())
    return page, _data(page), out


def test_the_page_embeds_every_row_of_the_database_and_needs_no_network(tmp_path):
    folder = tmp_path / "logs"
    _copies(folder, 3)
    for name in ("tiny-a.json", "tiny-sweeps.json", "schema1.json"):
        shutil.copy(LOGS / name, folder / name)
    db = tmp_path / "r.sqlite"
    assert cli("collect", folder, "--db", db).exit_code == 0
    page, data, _ = _board(tmp_path, db)
    con = database.read_copy(db)
    try:
        expected = database.board_rows(con)
    finally:
        con.close()
    assert embedded_rows(data) == expected and len(expected) == 88
    assert data["rows"] == len(expected) and data["logs"] == 6
    # its script and CSS are inline: no tag loads anything, and nothing names the network
    assert [attrs for attrs, _ in page.scripts] == [{"type": "application/json", "id": "board-data"}, {}]
    assert not [(t, a) for t, a in page.tags if {"src", "href"} & set(a) or t in ("link", "iframe", "img")]
    assert "http://" not in (tmp_path / "board.html").read_text() and "https://" not in (tmp_path / "board.html").read_text()
    # the page from the logs themselves is the page from their database
    _, from_logs, _ = _board(tmp_path, folder, name="from-logs.html")
    assert {**from_logs, "source": None} == {**data, "source": None}


def test_runs_of_one_machine_model_and_test_are_one_row_with_their_spread(tmp_path):
    paths = _copies(tmp_path / "logs", 3)
    _, data, _ = _board(tmp_path, tmp_path / "logs")
    logs = [runlog.load(p) for p in paths]
    warm = [g for g in data["groups"] if g["key"][data["key_columns"].index("phase")] == "warm"]
    assert len(warm) == 6 and all(len(g["runs"]) == 3 for g in data["groups"])
    cells = [c["id"] for c in data["columns"]]
    for g in warm:
        name = g["facets"]["model"][0]
        decode = [m.phases.warm.summary.decode_tok_s.median for log in logs for m in log.models if m.identity.name == name]
        eff = [m.phases.warm.roofline.measured.efficiency for log in logs for m in log.models if m.identity.name == name]
        spread = next(x["spread"] for x in board.groups(embedded_rows(data))
                      if x["key"] == dict(zip(data["key_columns"], g["key"])) and not x["marks"])
        assert spread["decode_tok_s"] == {"n": 3, "min": min(decode), "median": median(decode), "max": max(decode)}
        assert spread["measured_efficiency"]["median"] == median(eff)
        assert g["cells"][cells.index("decode_tok_s")][0] == f"{median(decode):.1f}"
        assert g["cells"][cells.index("decode_tok_s")][1] == f"{min(decode):.1f}–{max(decode):.1f}"
        assert g["cells"][cells.index("runs")][0] == "3" and g["marks"] == []
    # ordered by efficiency against the measured ceiling (no published one off Apple Silicon)
    medians = [g["cells"][cells.index("measured_efficiency")][2] for g in warm]
    assert medians == sorted(medians, reverse=True)


def test_runs_on_battery_in_low_power_mode_or_under_thermal_pressure_are_marked_apart(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    on_a_mac(OTHER, folder / "ac.json", power_source="ac", low_power_mode=False, thermal_state="nominal")
    on_a_mac(OTHER, folder / "battery.json", started="2026-12-02T10:00:00+00:00", power_source="battery",
             low_power_mode=True, power_mode="low", thermal_state="serious")
    _, data, _ = _board(tmp_path, folder)
    warm = [g for g in data["groups"] if g["facets"]["phase"] == ["warm"]]
    assert len(warm) == 12  # each model twice: the marked run is never in the unmarked one's row
    marked = [g for g in warm if g["marks"]]
    assert len(marked) == 6
    assert all(g["marks"] == ["battery", "low power mode", "thermal state serious"] for g in marked)
    assert all(g["facets"]["chip"] == ["Apple M4 Max, 40-core GPU"] for g in warm)
    cells = [c["id"] for c in data["columns"]]
    for g in warm:  # the published ceiling: the figure that compares across machines, with its ceiling
        text, under, value, _ = g["cells"][cells.index("spec_efficiency")]
        ceiling = g["runs"][0][data["run_columns"].index("spec_ceiling_tok_s")]
        assert value is not None and text == fmt_pct(value) and under == f"of {fmt_rate(ceiling)} tok/s"
    # the pure marks: each condition alone
    assert board.marks({"power_source": "battery"}) == ("battery",)
    assert board.marks({"thermal_pressure": "moderate", "throttled": 1}) == ("thermal pressure moderate", "throttled")
    assert board.marks({"thermal_pressure": "nominal", "thermal_state": "nominal", "complete": 1, "status": "ok"}) == ()
    assert board.marks({"complete": 0, "status": "refused"}) == ("incomplete run", "refused")


BENCH = LOGS / "tiny-bench.json"  # a default run's phases on one llama.cpp model: cold, warm, prefix, bench


def test_a_default_runs_bench_tests_are_rows_of_the_page_after_the_resident_phases(tmp_path):
    _, data, _ = _board(tmp_path, BENCH)
    cols = [c["id"] for c in data["columns"]]
    phase = data["key_columns"].index("phase")
    order = [g["key"][phase] for g in data["groups"]]
    assert order == ["warm", "prefix", "cold", "bench", "bench"]  # the resident model first, then the registry's order
    bench = {g["cells"][cols.index("test")][0]: g for g in data["groups"] if g["key"][phase] == "bench"}
    assert sorted(bench) == ["bench pp512", "bench tg128"]
    pp, tg = bench["bench pp512"], bench["bench tg128"]
    case_pp, case_tg = runlog.load(BENCH).models[0].phases.bench.cases
    assert pp["cells"][cols.index("test")][1].startswith("512 → 0")
    assert pp["cells"][cols.index("prefill_tok_s")][2] == case_pp.summary.prefill_tok_s.median
    assert pp["cells"][cols.index("decode_tok_s")][0] == pp["cells"][cols.index("measured_efficiency")][0] == ""
    assert tg["cells"][cols.index("test")][1].startswith("1 → 128")
    assert tg["cells"][cols.index("decode_tok_s")][2] == case_tg.summary.decode_tok_s.median
    text, under, value, _ = tg["cells"][cols.index("measured_efficiency")]
    assert value == case_tg.roofline.measured.efficiency and text == fmt_pct(value)
    assert under == f"of {fmt_rate(case_tg.roofline.measured.ceiling_tok_s)} tok/s"


def _hostile_log(tmp_path: Path) -> Path:
    data = runlog.load(OTHER).to_json()
    data["models"][0]["identity"]["name"] = HOSTILE
    data["models"][0]["identity"]["quant_declared"] = '<img src=x onerror="alert(2)">'
    data["machine"]["cpu_model"] = "AMD <b>EPYC</b> & co"
    out = tmp_path / "hostile.json"
    runlog.save(RunLog.from_json(data), out)
    return out


def test_text_from_a_log_stays_text(tmp_path):
    page, data, out = _board(tmp_path, _hostile_log(tmp_path))
    text = out.read_text()
    assert len(page.scripts) == 2 and HOSTILE not in text and "<img" not in text and "<b>" not in text
    assert not [t for t, _ in page.tags if t in ("img", "b")]
    names = [n for g in data["groups"] for n in g["facets"]["model"]]
    assert HOSTILE in names and "AMD <b>EPYC</b> & co, 2 cores" in {c for g in data["groups"] for c in g["facets"]["chip"]}


def test_board_wants_one_database_or_logs(tmp_path):
    db = tmp_path / "r.sqlite"
    assert cli("collect", OTHER, "--db", db).exit_code == 0
    out = cli("board", db, OTHER, "-o", tmp_path / "b.html")
    assert out.exit_code == 2 and "give one results database, or run logs" in out.output
    out = cli("board", LOGS / "malformed.json", OTHER, "-o", tmp_path / "b.html")
    assert out.exit_code == 2 and "refused: " in out.output and (tmp_path / "b.html").exists()


# -- the page in a browser ---------------------------------------------------------------------
CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (Debian: apt-get install "
                                                               "chromium): the page's DOM is not checked here")


def _dom(page: Path, tmp_path: Path, **view: str) -> _Page:
    """The page as headless Chromium leaves it once its script ran, opened at ``#view``."""
    assert CHROMIUM is not None
    cmd = [CHROMIUM, "--headless", "--disable-gpu", f"--user-data-dir={tmp_path / 'chromium'}", "--dump-dom",
           page.as_uri() + "#" + urlencode(view)]
    if os.geteuid() == 0:  # chromium will not run its sandbox as root
        cmd.insert(1, "--no-sandbox")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return _Page(done.stdout)


@needs_chromium
def test_chromium_builds_sorts_and_filters_the_table(tmp_path):
    folder = tmp_path / "logs"
    _copies(folder, 2)
    on_a_mac(OTHER, folder / "mac.json", started="2026-12-03T10:00:00+00:00", power_source="battery")
    shutil.copy(_hostile_log(tmp_path), folder / "hostile.json")
    _, data, page = _board(tmp_path, folder)
    warm = [g for g in data["groups"] if g["facets"]["phase"] == ["warm"]]
    cols = [c["id"] for c in data["columns"]]

    shown = _dom(page, tmp_path)  # as opened: the warm phase, in the page's own order
    assert [r["model"] for r in shown.rows] == [g["cells"][cols.index("model")][0] for g in warm]
    assert [r["decode_tok_s"] for r in shown.rows] == [g["cells"][cols.index("decode_tok_s")][0] for g in warm]
    assert [r["marks"] for r in shown.rows] == ["".join("|" + m for m in g["marks"]) for g in warm]
    assert len(shown.scripts) == 2 and not [t for t, _ in shown.tags if t in ("img", "b")]

    def decode_order(rows):
        return [float(r["decode_tok_s"]) for r in rows]

    once = _dom(page, tmp_path, click="decode_tok_s")  # a click: largest first
    assert decode_order(once.rows) == sorted(decode_order(shown.rows), reverse=True)
    twice = _dom(page, tmp_path, click="decode_tok_s,decode_tok_s")  # again: turned round
    assert decode_order(twice.rows) == sorted(decode_order(shown.rows))

    hostile = _dom(page, tmp_path, model=HOSTILE, phase="")  # filtered: every phase of one model
    assert {r["model"] for r in hostile.rows} == {HOSTILE} and len(hostile.rows) == 3  # cold, warm, prefix
    mac = _dom(page, tmp_path, chip="Apple M4 Max, 40-core GPU")
    assert len(mac.rows) == 6 and all(r["marks"] == "|battery" for r in mac.rows)
    assert all(r["spec_efficiency"].endswith("%") for r in mac.rows)


def test_a_log_that_does_not_verify_is_refused_or_shown_marked(tmp_path):
    data = json.loads(OTHER.read_text())
    data["models"][0]["phases"]["warm"]["summary"]["decode_tok_s"]["median"] *= 2  # edited by hand
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    out = cli("board", edited, LOGS / "tiny-a.json", "-o", tmp_path / "b.html")
    assert out.exit_code == 2 and "edited.json: does not verify" in out.output
    page, data, _ = _board(tmp_path, edited, "--allow-unverified")
    assert {tuple(g["marks"]) for g in data["groups"]} == {("unverified",)}
