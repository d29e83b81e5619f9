"""`macprof export`: llama-bench's formats held to llama-bench's own output (recorded from the
llama-bench that benchmarks/build_llama_bench.sh builds, on the tiny demo Q4_K_M:
tests/fixtures/llama-bench), its definitions on a worked example of injected stamps, mlx-lm's
BENCHMARKS.md table and the Apple Silicon thread's row, and what a log that cannot give a figure says."""

import csv
import io
import json
import sqlite3

import pytest

from macprof.analyse.llamabench import bench_tests
from macprof.measure.llamabench import figures
from macprof.model.log import Identity, ModelResult, Phases
from macprof.model.phases import Request, Sweep, SweepCase, WarmPhase
from macprof.render.llamabench import FIELDS
from tests.conftest import FIXTURES, cli
from tests.test_run import macprof

LLAMA_BENCH = FIXTURES / "llama-bench"  # llama-bench -m demo-tiny-q4_k_m.gguf -p 64 -n 16 -r 2 -o FORMAT
TINY_A = FIXTURES / "runlogs/tiny-a.json"  # llama.cpp and MLX demo models, warm and prefix phases
MS = 1_000_000


# -- the definitions on a worked example -------------------------------------------------------
def _request(kind="measured", **stamps) -> Request:
    return Request(kind=kind, status="ok", **stamps)


def test_definitions_on_a_worked_example():
    """pp512: 512 tokens over their batch's time; tg128: 128 tokens over the time of all 128, the
    first decode step included; a warm request: its 127 decode steps after a 512-token prompt."""
    pp = [_request(t0=0, t_tokenized=0, t_prefilled=t * MS, prompt_tokens=512, computed_prompt_tokens=512,
                   reused_tokens=0) for t in (1000, 2000)]
    tg = [_request(t0=0, t_tokenized=0, token_times=tuple((50 + 10 * i) * MS for i in range(128)), prompt_tokens=1,
                   n_tokens=128, reused_tokens=0)]
    warm = [_request(t0=0, t_tokenized=MS, token_times=tuple((800 + 10 * i) * MS for i in range(128)),
                     prompt_tokens=512, n_tokens=128, reused_tokens=0)]
    m = ModelResult(identity=Identity(name="m", engine="llama.cpp"), phases=Phases(
        bench=Sweep(cases=(SweepCase(id="pp512", status="ok", test="pp", prompt_tokens=512, gen_tokens=0, requests=tuple(pp)),
                           SweepCase(id="tg128", status="ok", test="tg", prompt_tokens=1, gen_tokens=128,
                                     requests=tuple(tg)))),
        warm=WarmPhase(requests=tuple(warm))))
    tests, missing = bench_tests(m)
    by = {t.name: t.figures for t in tests}
    assert set(by) == {"pp512", "tg128", "tg127 @ d512"}
    assert by["pp512"].samples_ts == (512.0, 256.0) and by["pp512"].avg_ts == 384.0
    assert by["pp512"].avg_ns == 1_500_000_000 and by["pp512"].stddev_ns == 707_106_781  # sqrt(0.5e18), truncated
    assert by["pp512"].stddev_ts == pytest.approx(181.01934, rel=1e-6)  # the sample deviation (n - 1)
    # t_128 = 50 ms + 127 x 10 ms = 1.32 s: 128 / 1.32 s, where macprof's decode is 127 / 1.27 s = 100
    assert by["tg128"].avg_ts == pytest.approx(128 / 1.32) and by["tg128"].stddev_ts == 0.0
    assert by["tg127 @ d512"].avg_ts == pytest.approx(100.0) and by["tg127 @ d512"].samples_ns == (1_270_000_000,)
    assert missing == []  # the warm phase's prefill is no pp512, and the bench phase measured one
    alone = bench_tests(m.replace(phases=Phases(warm=WarmPhase(requests=tuple(warm)))))
    assert [t.name for t in alone[0]] == ["tg127 @ d512"]
    assert alone[1] == ["m: pp512 not exported from the warm phase: its prefill ends with the first generated token, "
                        "which llama-bench's pp never generates (--preset llama-bench measures pp512)"]


def test_figures_refuse_what_is_no_test():
    with pytest.raises(ValueError):
        figures([], 128)
    assert figures([2 * 10 ** 9], 128).stddev_ns == 0  # one repetition: llama-bench's stdev is 0


# -- the formats against llama-bench's own -----------------------------------------------------
@pytest.fixture(scope="module")
def bench_log(fake_dir, tmp_path_factory):
    """A fake-engine `--preset llama-bench` run (short lengths), edited into what a llama.cpp engine on
    this machine records (its facts and resolved settings as the real engine writes them), so that
    its rows go through llama.cpp's fields: -> the edited log's path."""
    out = tmp_path_factory.mktemp("export")
    log = out / "fake.json"
    macprof("run", str(fake_dir / "fake-a.gguf"), "--engine", "fake", "--preset", "llama-bench", "--reps", "2",
            "--log", str(log))
    data = json.loads(log.read_text())
    (m,) = data["models"]
    m["identity"].update(engine="llama.cpp", quant_label="Q4_0", quant_declared="Q4_0")
    m["engine_versions"] = {"llama_cpp_python": "0.3.36", "threads": 2, "threads_source": "psutil physical cores",
                            "load": {"devices": [{"name": "CPU", "description": "Intel(R) Xeon(R) Processor", "type": 0,
                                                  "total_bytes": 1}], "n_gpu_layers": -1, "load_mode": "auto"},
                            "model_desc": "llama ?B Q4_K - Medium", "model_size": 2398976, "model_n_params": 3671296,
                            "backends": [{"name": "CPU", "devices": 1}], "ggml_commit": "0c1e570-dirty",
                            "ggml_version": "0.25.3"}

    def r(asked, value):
        return {"asked": asked, "value": value, "source": "test", "unknown": None}

    m["engine_settings"] = {"n_batch": r(2048, 80), "n_ubatch": r(512, 80), "n_threads": r(2, 2),
                            "flash_attn": r("auto", "enabled"), "type_k": r("f16", "f16"), "type_v": r("f16", "f16"),
                            "n_gpu_layers": r(-1, 0), "mmap": r("auto", True), "split_mode": r("layer", "layer"),
                            "main_gpu": r(0, 0), "no_kv_offload": r(False, False), "no_op_offload": r(False, False),
                            "embeddings": r(False, False), "repack": r(True, True), "no_host": r(False, False)}
    edited = out / "llama.json"
    edited.write_text(json.dumps(data))
    return edited


def _export(path, fmt, *more):
    r = cli("export", path, "--format", fmt, *more)
    assert r.exit_code == 0, r.output
    return r.stdout  # the missing figures' lines go to stderr


# the fields that describe the run's settings, as llama-bench writes its defaults, and the few
# macprof writes otherwise: flash attention as resolved (llama-bench: -1, asked auto)
SETTINGS = [f for f in FIELDS if f not in ("build_number", "model_filename", "n_prompt", "n_gen", "test_time", "avg_ns",
                                           "stddev_ns", "avg_ts", "stddev_ts", "flash_attn")]


def test_json_is_llama_benchs(bench_log):
    theirs = json.loads((LLAMA_BENCH / "demo-tiny-q4_k_m.json").read_text())
    ours = json.loads(_export(bench_log, "llama-bench-json"))
    assert [list(r) for r in ours] == [list(r) for r in theirs] == [[*FIELDS, "samples_ns", "samples_ts"]] * 2
    for mine, real in zip(ours, theirs):
        assert {k: type(v) for k, v in mine.items()} == {k: type(v) for k, v in real.items()}
        assert {f: mine[f] for f in SETTINGS} == {f: real[f] for f in SETTINGS}  # llama-bench's own defaults
        assert (mine["n_prompt"], mine["n_gen"]) == {512: (512, 0), 0: (0, 128)}[mine["n_prompt"]]
        assert mine["flash_attn"] == 1 and real["flash_attn"] == -1  # resolved, where llama-bench writes "auto"
        assert mine["avg_ts"] == pytest.approx(sum(mine["samples_ts"]) / 2, rel=1e-5)
    assert ours[0]["build_commit"] == "0c1e570" == theirs[0]["build_commit"]  # ggml_commit() of the vendored sources


def test_jsonl_is_llama_benchs(bench_log):
    theirs = (LLAMA_BENCH / "demo-tiny-q4_k_m.jsonl").read_text().splitlines()
    ours = _export(bench_log, "llama-bench-jsonl").splitlines()
    assert len(ours) == len(theirs) == 2
    for mine, real in zip(ours, theirs):
        assert list(json.loads(mine)) == list(json.loads(real))
        for line in (mine, real):  # jsonl_printer's own spacing: none before samples_ts
            assert line.startswith('{"build_commit": "') and '"stddev_ts": ' in line and '],"samples_ts": [ ' in line

def test_csv_is_llama_benchs(bench_log):
    theirs = (LLAMA_BENCH / "demo-tiny-q4_k_m.csv").read_text().splitlines()
    ours = _export(bench_log, "llama-bench-csv").splitlines()
    assert ours[0] == theirs[0] == ",".join(FIELDS)
    rows = list(csv.DictReader(io.StringIO("\n".join(ours))))
    real = list(csv.DictReader(io.StringIO("\n".join(theirs))))
    assert all(line.startswith('"') and line.endswith('"') for line in ours[1:])  # every value quoted, as theirs
    assert [{f: r[f] for f in SETTINGS} for r in rows] == [{f: r[f] for f in SETTINGS} for r in real]


def test_sql_is_llama_benchs(bench_log):
    theirs = (LLAMA_BENCH / "demo-tiny-q4_k_m.sql").read_text()
    ours = _export(bench_log, "llama-bench-sql")
    assert ours.split(";")[0] == theirs.split(";")[0]  # CREATE TABLE IF NOT EXISTS llama_bench (...) to the letter
    db = sqlite3.connect(":memory:")
    db.executescript(theirs)
    db.executescript(ours)  # the same table, both tools' rows in it
    got = db.execute("SELECT build_commit, n_prompt, n_gen, typeof(avg_ts), typeof(n_threads), typeof(flash_attn) "
                     "FROM llama_bench ORDER BY n_gen, rowid").fetchall()
    assert len(got) == 4 and {row[3:] for row in got} == {("real", "integer", "integer")}
    assert {(row[1], row[2]) for row in got} == {(64, 0), (0, 16), (512, 0), (0, 128)}


def test_sql_quotes_a_quote(bench_log, tmp_path):
    data = json.loads(bench_log.read_text())
    data["models"][0]["identity"]["path"] = "/models/it's.gguf"
    (tmp_path / "q.json").write_text(json.dumps(data))
    db = sqlite3.connect(":memory:")
    db.executescript(_export(tmp_path / "q.json", "llama-bench-sql"))
    assert {row[0] for row in db.execute("SELECT model_filename FROM llama_bench")} == {"/models/it's.gguf"}


def test_markdown_is_llama_benchs(bench_log):
    theirs = (LLAMA_BENCH / "demo-tiny-q4_k_m.md").read_text().splitlines()
    ours = _export(bench_log, "llama-bench-md").splitlines()

    def cells(line):
        return [c for c in line.split("|")[1:-1]]

    # llama-bench's columns for a CPU backend at its defaults, and "fa": flash attention not its default (auto)
    assert [c.strip() for c in cells(ours[0])] == ["model", "size", "params", "backend", "threads", "fa", "test", "t/s"]
    assert [c.strip() for c in cells(theirs[0])] == ["model", "size", "params", "backend", "threads", "test", "t/s"]
    keep = [0, 1, 2, 3, 4, 6, 7]  # every column of theirs, same widths and alignment
    assert [cells(ours[0])[i] for i in keep] == cells(theirs[0]) and [cells(ours[1])[i] for i in keep] == cells(theirs[1])
    assert [cells(row)[6].strip() for row in ours[2:4]] == ["pp512", "tg128"]
    for mine, real in zip(ours[2:4], theirs[2:4]):
        assert [cells(mine)[i] for i in (0, 1, 2, 3, 4)] == [cells(real)[i] for i in (0, 1, 2, 3, 4)]
        assert " ± " in cells(mine)[7] and len(cells(real)[6]) == 22  # 20 wide, as llama-bench pads it
    assert ours[-1] == "build: 0c1e570 (0)"  # llama-bench's footer (the build number the wheel does not record: 0)


# -- both engines, missing figures -----------------------------------------------------------
def test_rows_for_both_engines():
    rows = json.loads(_export(TINY_A, "llama-bench-json"))
    by = {r["backends"]: r for r in rows}
    mlx = by["MLX"]
    assert mlx["build_commit"] == json.loads(TINY_A.read_text())["software"]["mlx_lm"]  # mlx-lm's version as the build
    assert mlx["n_threads"] == 0 and mlx["model_type"].startswith("llama ")
    assert {(r["n_prompt"], r["n_gen"], r["n_depth"]) for r in rows} == {(0, 7, 32)}  # the warm phase: tg7 @ d32


def test_a_log_missing_phases_says_so_and_exports_nothing(tmp_path):
    data = json.loads(TINY_A.read_text())
    for m in data["models"]:
        m["phases"].pop("warm")
        m["settings"]["phases"] = [p for p in m["settings"]["phases"] if p != "warm"]
    (tmp_path / "nowarm.json").write_text(json.dumps(data))
    r = cli("export", tmp_path / "nowarm.json", "--format", "llama-bench-json")
    assert r.exit_code == 2 and "nothing in llama-bench-json" in r.output
    assert r.output.count("no llama-bench test in this log") == len(data["models"])


def test_a_failed_request_leaves_its_test_out(tmp_path):
    data = json.loads(TINY_A.read_text())
    request = next(r for r in data["models"][0]["phases"]["warm"]["requests"] if r["kind"] == "measured")
    request.update(status="error", error="RuntimeError: boom")
    (tmp_path / "failed.json").write_text(json.dumps(data))
    r = cli("export", tmp_path / "failed.json", "--format", "llama-bench-json")
    assert r.exit_code == 0
    name = data["models"][0]["identity"]["name"]
    measured = sum(1 for x in data["models"][0]["phases"]["warm"]["requests"] if x["kind"] == "measured")
    assert f"{name}: warm: 1 of {measured} measured requests failed: no row" in r.output
    rows = json.loads(r.stdout)
    assert len(rows) == len(data["models"]) - 1


def test_output_file(bench_log, tmp_path):
    r = cli("export", bench_log, "--format", "llama-bench-jsonl", "-o", tmp_path / "rows.jsonl")
    assert r.exit_code == 0 and r.stdout == ""
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 2
    assert cli("export", bench_log, "--format", "nope").exit_code == 2


# -- mlx-lm's table and the Apple Silicon thread's row -----------------------------------------
def test_mlx_md_is_mlx_lms_table():
    text = _export(TINY_A, "mlx-md")
    data = json.loads(TINY_A.read_text())
    mlx = [m for m in data["models"] if m["identity"]["engine"] == "mlx"]
    lines = text.splitlines()
    assert lines[0] == "<details>" and lines[-1] == "</details>" and "<summary> demo-tiny-mlx </summary>" in text
    header = next(line for line in lines if line.startswith("Precision"))
    s = mlx[0]["settings"]
    assert header == (f"Precision | Prompt ({s['prompt_tokens']}) tok/sec | Generation ({s['gen_tokens']}) tok/sec | "
                      f"Memory GB | Repo")
    rows = [line.split(" | ") for line in lines[lines.index(header) + 2:] if line.count(" | ") == 4]
    assert [r[0] for r in rows] == ["fp16", "q8"] and [r[4] for r in rows] == [m["identity"]["name"] for m in mlx]
    for row, m in zip(rows, mlx):  # mlx_lm.benchmark's definitions, recomputed from the raw stamps
        ok = [r for r in m["phases"]["warm"]["requests"] if r["kind"] == "measured"]
        prompt = sum(r["prompt_tokens"] * 1e9 / (r["token_times"][0] - r["t_tokenized"]) for r in ok) / len(ok)
        gen = sum(r["n_tokens"] * 1e9 / (r["token_times"][-1] - r["token_times"][0]) for r in ok) / len(ok)
        assert float(row[1]) == pytest.approx(prompt, abs=5e-4) and float(row[2]) == pytest.approx(gen, abs=5e-4)
    assert f"- mlx-lm {data['software']['mlx_lm']}" in lines and f"- mlx {data['software']['mlx']}" in lines


def test_apple_silicon_row(bench_log, tmp_path):
    data = json.loads(bench_log.read_text())
    data["machine"].update(chip="Apple M2", gpu_cores=10)
    (tmp_path / "m2.json").write_text(json.dumps(data))
    r = cli("export", tmp_path / "m2.json", "--format", "apple-silicon-md")
    table = r.stdout.splitlines()
    assert table[0] == ("| Chip | BW [GB/s] | GPU Cores | F16 PP [t/s] | F16 TG [t/s] | Q8_0 PP [t/s] | Q8_0 TG [t/s] | "
                        "Q4_0 PP [t/s] | Q4_0 TG [t/s] |")
    cells = [c.strip() for c in table[2].split("|")[1:-1]]
    assert cells[:7] == ["M2", "100", "10", "", "", "", ""] and all(float(c) > 0 for c in cells[7:])
    assert "F16 PP and TG: no F16 model in the log" in r.stderr and len(table) == 3
