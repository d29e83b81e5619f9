"""The exporters (text table, markdown, JSON, CSV) on a constructed table with hostile strings,
`macprof show --format` on a real run log, and `macprof compare` rebuilt on the exporters."""

import csv
import io
import json
import math

import pytest

from macprof.render.exporters import Column, Table, cell, text_table, to_csv, to_json, to_markdown, to_text
from macprof.render.summary import SUMMARY_FIELDS, summary_rows, warnings
from macprof.render.text import fmt_bytes, fmt_pct, fmt_rate, fmt_s, fmt_x
from macprof.store import runlog
from tests.conftest import FIXTURES, cli as run, recomputed

LOGS = FIXTURES / "runlogs"
A, B = LOGS / "tiny-a.json", LOGS / "tiny-b.json"
HOSTILE = "evil|model\nsecond line\x1b[31m red\r\t=cmd() \\ \"quoted\", comma"


def _table() -> Table:
    rows = ({"name": HOSTILE, "ttft_s": 0.0123, "bytes": 3 * 2**20, "ok": True, "flags": ["a|b", "c"]},
            {"name": "plain", "ttft_s": None, "bytes": None, "ok": False, "flags": []},
            {"name": "-starts like a formula", "ttft_s": math.nan, "bytes": 1, "ok": False, "flags": []})
    columns = (Column("model", cell("name")), Column("TTFT", cell("ttft_s", fmt_s)),
               Column("size", cell("bytes", fmt_bytes)), Column("flags", lambda r: ", ".join(r["flags"])))
    return Table("constructed", columns, rows, ("name", "ttft_s", "bytes", "ok", "flags"),
                 notes=("baseline: x|y", "significance: none"), meta={"baseline": "x|y"})


def _md_cells(line: str) -> list[str]:
    """Split a markdown table row at its unescaped pipes, as a GFM renderer does."""
    cells, cur, i = [], "", 1
    while i < len(line) - 1:
        if line[i] == "\\":
            cur += line[i:i + 2]
            i += 2
            continue
        if line[i] == "|":
            cells.append(cur.strip())
            cur = ""
        else:
            cur += line[i]
        i += 1
    return cells + [cur.strip()]


# -- each exporter on a constructed table ----------------------------------------------------
def test_text_table_stays_one_aligned_line_per_row():
    out = to_text(_table())
    table, notes = out.split("\n\n")
    lines = table.split("\n")
    assert len(lines) == 2 + 3 and len({len(line) for line in lines}) == 1  # header, rule, rows: aligned
    assert "\x1b" not in out and "\r" not in out and "\t" not in out
    assert lines[2].startswith("evil|model second line red  =cmd()")  # the whole escape sequence goes
    assert "12.3 ms" in lines[2] and "3.0 MiB" in lines[2]
    assert lines[3].split() == ["plain", "-", "-"]
    assert notes == "baseline: x|y; significance: none"


def test_markdown_escapes_what_would_break_the_table():
    out = to_markdown(_table())
    table, notes = out.split("\n\n")
    lines = table.split("\n")
    assert len(lines) == 2 + 3 and "\x1b" not in out and "\r" not in out
    assert _md_cells(lines[0]) == ["model", "TTFT", "size", "flags"] and lines[1] == "|---|---:|---:|---:|"
    for line in lines[2:]:
        assert len(_md_cells(line)) == 4, line
    first = _md_cells(lines[2])
    assert first[0] == "evil\\|model second line red  =cmd() \\\\ \"quoted\", comma" and first[3] == "a\\|b, c"
    assert notes == "Baseline: x\\|y. Significance: none."


def test_csv_carries_raw_values_and_parses_back():
    out = to_csv(_table())
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["name", "ttft_s", "bytes", "ok", "flags"] and len(rows) == 4  # one line per row
    evil, plain, formula = rows[1:]
    assert "\n" not in evil[0] and "\x1b" not in evil[0] and evil[0].startswith("evil|model second line")
    assert float(evil[1]) == 0.0123 and int(evil[2]) == 3 * 2**20 and evil[3] == "true" and evil[4] == "a|b; c"
    assert plain[1:] == ["", "", "false", ""]  # unknown is empty, never "-" or 0
    assert formula[0] == "'-starts like a formula" and formula[1] == ""  # no spreadsheet formula; NaN unknown


def test_json_carries_raw_values():
    doc = json.loads(to_json(_table()))
    assert doc["title"] == "constructed" and doc["baseline"] == "x|y"
    evil, plain, formula = doc["rows"]
    assert evil == {"name": HOSTILE, "ttft_s": 0.0123, "bytes": 3 * 2**20, "ok": True, "flags": ["a|b", "c"]}
    assert plain["ttft_s"] is None and formula["ttft_s"] is None  # NaN is unknown: valid JSON


def test_text_table_names_blank_and_repeated_headers():
    t = text_table(["B", "vs B=1", "ITL", "vs B=1", ""], [["1", "x1.00", "5 ms", "x1.00", ""]])
    assert t.fields == ("B", "vs B=1", "ITL", "vs B=1 (4)", "column (5)")
    assert json.loads(to_json(t))["rows"] == [dict(zip(t.fields, ["1", "x1.00", "5 ms", "x1.00", ""]))]
    assert to_text(t).split("\n")[0].split() == ["B", "vs", "B=1", "ITL", "vs", "B=1"]


# -- show --format on a real run log ---------------------------------------------------------
def test_show_text_is_the_default():
    default, text = run("show", A), run("show", A, "--format", "text")
    assert default.exit_code == 0 and default.output == text.output
    assert "cold trial 1" in text.output and "decode tok/s p50" in text.output


def test_show_json_is_the_summary_rows_raw():
    log = runlog.load(A)
    r = run("show", A, "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    expect = summary_rows(log)
    assert [list(row) for row in doc["rows"]] == [list(SUMMARY_FIELDS)] * len(log.models)
    for row, want, m in zip(doc["rows"], expect, log.models):
        assert row == {f: want[f] for f in SUMMARY_FIELDS}
        assert row["decode_tok_s"] == m.phases.warm.summary.decode_tok_s.median
    assert doc["warnings"] == warnings(log) and doc["complete"] is True


def test_show_csv_is_the_summary_rows_raw():
    log = runlog.load(A)
    rows = list(csv.DictReader(io.StringIO(run("show", A, "--format", "csv").output)))
    assert len(rows) == len(log.models) and list(rows[0]) == list(SUMMARY_FIELDS)
    raw = json.loads(A.read_text())["models"]
    for row, m, d in zip(rows, log.models, raw):
        assert row["model"] == m.identity.name
        assert float(row["decode_tok_s"]) == m.phases.warm.summary.decode_tok_s.median
        assert int(row["peak_rss_bytes"]) == max(p["memory"]["peak_rss_bytes"] for p in d["phases"].values()
                                                 if p.get("memory", {}).get("peak_rss_bytes"))


def test_show_markdown_has_summary_and_warnings():
    log = runlog.load(A)
    out = run("show", A, "--format", "markdown").output
    lines = out.split("\n")
    assert lines[0].startswith("**macprof ") and "(complete)" in lines[0]
    rows = [line for line in lines if line.startswith("| demo-tiny")]
    assert [_md_cells(r)[0] for r in rows] == [m.identity.name for m in log.models]
    assert {len(_md_cells(r)) for r in rows} == {len(_md_cells(lines[2]))} == {11}
    assert [line[2:] for line in lines if line.startswith("- ")] == warnings(log)


def test_show_markdown_and_csv_survive_hostile_names(tmp_path):
    data = json.loads(A.read_text())
    data["models"][0]["identity"]["name"] = "bad|name\n| injected | row |\x1b[2J"
    data["models"][0]["failures"] = [{"phase": "warm", "status": "error", "reason": "line one\nline | two"}]
    p = tmp_path / "hostile.json"
    p.write_text(json.dumps(recomputed(data)))  # a failure counts in the summaries: as a run would have them
    md = run("show", p, "--format", "markdown")
    assert md.exit_code == 0, md.output
    assert "\x1b" not in md.output and "| injected" not in md.output.replace("\\| injected", "")
    table = [line for line in md.output.split("\n") if line.startswith("| ")]
    assert len(table) == 1 + len(data["models"]) and {len(_md_cells(t)) for t in table} == {11}
    rows = list(csv.DictReader(io.StringIO(run("show", p, "--format", "csv").output)))
    assert len(rows) == len(data["models"]) and rows[0]["model"] == "bad|name | injected | row |"


# -- compare on the exporters ------------------------------------------------------------------
def test_compare_text_table_is_unchanged():
    """The text table as the per-format code printed it before the exporters (recorded from
    that code on these logs)."""
    expect = (FIXTURES / "compare-tiny-a-b.txt").read_text()
    assert run("compare", A, B).output == expect


@pytest.mark.parametrize("extra", [(), ("--baseline", "demo-tiny-mlx-f16")])
def test_compare_formats_show_the_same_raw_values(extra):
    doc = json.loads(run("compare", A, B, "--format", "json", *extra).output)
    rows = list(csv.DictReader(io.StringIO(run("compare", A, B, "--format", "csv", *extra).output)))
    text = run("compare", A, B, *extra).output.split("\n")[2:2 + len(rows)]
    assert len(doc["rows"]) == len(rows) == len(text) == 8
    for j, c, t in zip(doc["rows"], rows, text):
        assert c["model"] == j["model"] and float(c["decode_tok_s"]) == j["decode_tok_s"]
        assert c["decode_p"] == ("" if j["decode_p"] is None else repr(j["decode_p"]))
        cells = [j["model"], j["run"], fmt_s(j["warm_ttft_s"]), fmt_rate(j["decode_tok_s"]), fmt_pct(j["efficiency"]),
                 fmt_bytes(j["peak_rss_bytes"])]
        assert all(x in t for x in cells), (t, cells)
        assert ("baseline" in t) if j["baseline"] else f"{fmt_x(j['decode_vs_base'])} {j['decode_call']}" in t


def test_a_negative_duration_keeps_its_unit_and_sign():
    """A first request quicker than the warm median reads -117.2 ms, never '+-117198 µs'."""
    from macprof.render.text import fmt_s, fmt_signed_s

    assert fmt_s(-0.1172) == "-117.2 ms"
    assert fmt_signed_s(-0.1172) == "-117.2 ms"
    assert fmt_signed_s(0.0939) == "+93.9 ms"
    assert fmt_signed_s(-2e-5) == "-20 µs"
    assert fmt_signed_s(None) == "-"
