"""Command line: thin click commands over typed options. Imports are lazy, so `--help`,
`show` and `compare` never import an engine."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from macprof import __version__
from macprof.cli.dist import estimate_options, with_group
from macprof.cli.speculative import draft_arguments, draft_options
from macprof.cli.errors import Group, echo_err
from macprof.errors import MacprofError, NothingMeasured
from macprof.cli.options import declared_option, number, run_options
from macprof.sanitise import clean
from macprof.config.settings import INT_MAX, implied_phases
from macprof.engines import APIS

if TYPE_CHECKING:
    from macprof.config.settings import RunArgs, ServerArgs


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="macprof")
def main() -> None:
    """Profile local LLM inference (llama.cpp GGUF and MLX models) honestly: cold start,
    warm residence, prefix-cache reuse, memory, and the bandwidth ceiling."""


@main.command()
@click.argument("refs", nargs=-1, metavar="[MODEL]...")
@run_options  # every option: a setting's flag or a run option, each declared once (macprof/config/settings.py)
@click.pass_context
def run(ctx, refs, args: RunArgs, server: ServerArgs, given: dict) -> None:
    """Measure every model of the config, the MODELs named (GGUF file, MLX directory, hub id
    org/repo[:QUANT], ollama:NAME[:TAG], lmstudio:PUBLISHER/REPO; `macprof models` lists them) or a
    local server (--endpoint, --serve): cold start, warm residence, prefix reuse; when asked, a grid
    (--prompt-tokens/--gen-tokens lists, --shape), KV depths (--depth), batches (--batch), server
    load (--concurrency, --rate). Sweep options alone run only the sweeps."""
    from macprof import session
    from macprof.cli.models import bare_resume, ensure_demo_models, selected_models
    from macprof.cli.serve import measured_models
    from macprof.render.summary import render_summary
    from macprof.run import progress, signals

    # a bare --resume names again the server and the models.toml its journal records
    server, config_path, recorded = bare_resume(ctx, refs, args.resume, server, args.config_path)
    phases = implied_phases(given, given.get("phases") is not None, server.named, resumed=recorded is not None)
    overrides = {**given, "phases": phases} if phases else given
    names = args.model_names
    # from here to the summary a signal is answered in one line; a server --serve started stops
    with signals.guard() as guard, measured_models(ctx, config_path, server, overrides, lambda: selected_models(
            ctx, refs, args.engine, config_path, names, overrides, args.resume), recorded) as selected:
        ensure_demo_models(selected)
        log_path = session.log_path_for(args.log_path, args.resume)
        display = progress.to_stream(sys.stderr)
        try:
            log = session.measure(selected, log_path, display, resume=args.resume is not None, overwrite=args.force_overwrite)
        finally:
            display.close()  # before anything else is printed, and on Ctrl-C: the terminal as it was
        click.echo(render_summary(log, str(log_path)))
        if guard.received or not log.complete:
            echo_err(clean(session.interrupted_note(log, log_path)))
            sys.exit(130)
    if not session.measured_anything(log_path):  # a run that measured nothing must not read as a success
        raise NothingMeasured(f"the run measured nothing: every model was refused or failed (the warnings above "
                              f"say why); the run log is written: {log_path}")


@main.command()
@click.option("--size", type=click.Choice(["tiny", "small"]), default="small", show_default=True)
@click.option("--dir", "root", type=click.Path(path_type=Path), help="Where to build [per-user cache].")
def demo(size, root) -> None:
    """Synthesise the demo models (seeded weights, local tokenizer) in GGUF and MLX form."""
    from macprof.demo import build

    out = build.build(size, root, progress=lambda s: click.echo(s, err=True))
    click.echo(str(out / "models.toml"))


@main.command()
@click.argument("path", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json", "csv"]), default="text",
              show_default=True, help="text: every phase, then the summary; markdown: the summary, sweeps and "
                                      "warnings for an issue; json / csv: the summary rows as raw numbers.")
def show(path, fmt) -> None:
    """Render a run log, or the journal of an interrupted run."""
    from macprof.render.show import render_show
    from macprof.store.verify import load_checked

    log, unverified = load_checked(path)
    click.echo(render_show(log, fmt))
    if unverified:  # on stderr: what show prints stays the log's
        echo_err(clean(unverified))


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--baseline", help="Model name (or NAME@RUN) to compare against [the first row].")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "markdown"]), default="table", show_default=True)
@click.option("--case", "case", help="Compare one sweep case instead of the warm phase: depth:d4096, batch:b8, "
                                     "grid:p512-g128, grid:rag.")
@click.option("--fail-if", "fail_if", multiple=True,
              help="Exit 1 when a model regressed against the same model in the baseline's run, significantly and "
                   "past a limit: decode:-5%, ttft:+10%, memory:+10%, kld:+0.01 (mean KLD, nats), accuracy:-5% (task "
                   "accuracy, points, by the exact McNemar test). Exit 2 when too few requests (or paired tasks) were "
                   "recorded for the test to ever call a difference.")
def compare(paths, baseline, fmt, case, fail_if) -> None:
    """Compare models across run logs (files or folders), with significance on raw samples."""
    from macprof.analyse import compare as cmp
    from macprof.cli.results import logs_named
    from macprof.render.compare import compare_table
    from macprof.render.text import clean

    specs = cmp.parse_fail_if(list(fail_if))
    which = cmp.parse_case(case)
    logs, unverified = logs_named(paths)
    rows = [row for source, log in logs for row in cmp.rows_from(log, source, which)]
    if which and not rows:
        raise MacprofError(f"compare: no model in these logs has the case {case!r}")
    result = cmp.compare(rows, baseline)
    result["case"] = case
    click.echo(compare_table(result, fmt))
    for line in unverified:  # on stderr: the table stays the logs'
        echo_err(clean(line))
    bad = cmp.regressions(result, specs)
    for line in bad:
        click.echo(f"REGRESSION: {clean(line)}", err=True)
    unjudged = cmp.cannot_judge(result, specs)
    if unjudged:  # a gate that could never fire must not pass
        raise MacprofError(clean(unjudged))
    if bad:
        sys.exit(1)


@main.command()
@click.argument("path", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="Where to write [RUNLOG.shared.json].")
def share(path, output) -> None:
    """Write a copy of a run log that is safe to post: no user, host or home path in it."""
    from macprof.model.log import RunLog
    from macprof.store import runlog, share as sh
    from macprof.store.verify import load_checked

    log, unverified = load_checked(path)
    if unverified:  # the copy's digest is of what it holds: say that its original did not verify
        echo_err(clean(unverified))
    shared, removed = sh.redact(log.to_json())  # every string of the log, wherever it is
    runlog.validate(shared, "shared copy")
    out = output or sh.default_output(path)
    runlog.save(RunLog.from_json(shared), out)
    click.echo(f"wrote {clean(out)}")
    for item in removed or ["nothing identifying was found"]:
        click.echo(f"  removed: {clean(item)}")


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True, help="chart.png, .svg or .html")
def plot(paths, output) -> None:
    """Chart decode tok/s against the ceiling and cold / warm / prefix TTFT per model."""
    from macprof.cli.results import logs_named
    from macprof.render import plot as pl

    logs, unverified = logs_named(paths)
    click.echo(str(pl.plot(logs, output)))
    for line in unverified:
        echo_err(clean(line))


@main.command()
@click.argument("model", required=False)
@click.option("--params", callback=number, help="Parameters (8e9, 8B).")
@click.option("--active-params", callback=number, help="Active parameters per token (MoE).")
@click.option("--bits", type=float, help="Bits per weight (16, 8, 4.5...).")
@click.option("--bytes-per-param", type=float, help="Bytes per weight (2 for BF16).")
@click.option("--file-size", type=float, help="Weights read per token, GB (the 'file size' convention).")
@click.option("--bandwidth", type=float, help="Memory bandwidth, GB/s.")
@click.option("--chip", help="Apple chip, e.g. 'M5 Pro' (published bandwidth).")
@click.option("--gpu-cores", type=int, help="GPU cores, for chips sold in binned variants (M3/M4/M5 Max).")
@click.option("--tflops", type=float, help="Peak compute, TFLOP/s (for the compute bound).")
@click.option("--layers", type=int)
@click.option("--kv-heads", type=int)
@click.option("--head-dim", type=int)
@click.option("--kv-bits", type=float, default=16, show_default=True)
@declared_option("kv_type")  # the K/V cache type the MODEL is run with
@click.option("--context", type=int, default=0, show_default=True, help="Tokens of context per sequence.")
@declared_option("batches", dest="batches", default="1", show_default=True,
                 why="the batching table starts at B = 1 unless asked")
@click.option("--json", "as_json", is_flag=True)
@estimate_options
@draft_options
def estimate(model, params, active_params, bits, bytes_per_param, file_size, bandwidth, chip, gpu_cores, tflops,
             layers, kv_heads, head_dim, kv_bits, kv_type, context, batches, as_json, spec_draft, spec_acceptance,
             spec_draft_tokens, **group) -> None:
    """The roofline with no model run (MODEL: a path or a reference, as `run` takes): ceiling
    tok/s, KV cache size and the batching trade-off; with --draft and --acceptance, the
    speculative round and its speed-up for each k."""
    import json as _json

    from macprof.analyse import estimate as est
    from macprof.cli.models import model_file
    from macprof.render.estimate import render as render_estimate

    result = est.estimate(model=model_file(model, kv_type) if model is not None else None, params=params, active_params=active_params, bits=bits,
                          bytes_per_param=bytes_per_param, file_size_gb=file_size, bandwidth_gbs=bandwidth,
                          chip=chip, gpu_cores=gpu_cores, tflops=tflops, layers=layers, kv_heads=kv_heads,
                          head_dim=head_dim, kv_bits=kv_bits, context=context, batches=batches, kv_type=kv_type,
                          **draft_arguments(spec_draft, spec_acceptance, spec_draft_tokens, kv_type))
    result = with_group(result, **group)  # --hosts N: the group's two layouts beside it
    click.echo(_json.dumps(result, indent=1) if as_json else render_estimate(result))


@main.command()
@click.argument("model")
@declared_option("kv_type")  # the cache sized for it
@click.option("--json", "as_json", is_flag=True)
def inspect(model, kv_type, as_json) -> None:
    """Model shape and bytes from metadata alone (GGUF header / MLX config + safetensors headers);
    MODEL is a path or a reference, as `run` takes."""
    import json as _json

    from macprof.cli.models import model_path
    from macprof.collect import modelinfo
    from macprof.render.estimate import kv_rows
    from macprof.render.text import fmt_bytes, render_table

    info = modelinfo.inspect(model_path(model), kv_type)
    d = info.to_dict()
    if as_json:
        click.echo(_json.dumps(d, indent=1))
        return
    rows = [[k, fmt_bytes(v) + f" ({v} B)" if k.endswith("bytes") or k.endswith("per_token") and "kv" not in k
             else clean(v)] for k, v in d.items() if k not in ("bytes_by_type", "kv_layout", "kv_bytes_read_at")]
    rows += [[f"bytes of {clean(t)}", f"{fmt_bytes(b)} ({b} B)"] for t, b in sorted(d["bytes_by_type"].items())]
    rows += kv_rows(d["kv_layout"], d["kv_bytes_read_at"])
    click.echo(render_table(["field", "value"], rows))


@main.command(name="bandwidth")
@click.option("--device", type=click.Choice(["cpu", "gpu"]), help="[gpu (MLX) on macOS, cpu elsewhere]")
@click.option("--threads", type=click.IntRange(1, INT_MAX), help="CPU threads [all cores].")
@click.option("--reps", type=click.IntRange(1, INT_MAX), default=7, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def bandwidth_cmd(device, threads, reps, as_json) -> None:
    """Measure sustained memory read bandwidth (and peak matmul throughput) on the device the engines use."""
    import json as _json

    from macprof.collect import probes

    r = probes.measure(device=device, threads=threads, reps=reps)
    r["flops"] = f = probes.measure_flops(device=r["device"])
    if device is None and threads is None:  # what a run would measure: its cached figure (unless noisy)
        probes.store(r)
    if as_json:
        click.echo(_json.dumps(r, indent=1))
        return
    click.echo(f"{r['device']}: {r['median_gbs']:.1f} GB/s median, {r['best_gbs']:.1f} best, "
               f"stdev {r['stdev_gbs']:.1f} ({r['method']}; sizes {r['sizes_mib']} MiB x {r['reps']})")
    from macprof.measure.stats import UNSTABLE

    if probes.noisy(r):
        click.echo(f"not kept for the day's runs: its repetitions spread over {UNSTABLE:.0%} of their median "
                   f"(other work competed); measure again on a quiet machine", err=True)
    click.echo(f"{f['device']}: {f['median_tflops'] * 1e3:.1f} GFLOP/s median, {f['best_tflops'] * 1e3:.1f} best "
               f"({f['method']})")


@main.command()
@click.argument("refs", nargs=-1, metavar="[MODEL]...")
# the options `run` declares are made from their declarations (config/settings.py); each place
# where the benchmark reads one otherwise is an override, with its reason
@declared_option("engine")
@declared_option("config_path")
@declared_option("names", default=("demo-small-q4_k_m,demo-small-mlx-f16",), show_default=True,
                 why="without MODEL arguments the benchmark measures the two small demo models")
@click.option("--path", "which", type=click.Choice(["loop", "run", "both", "speculative"]), default="both",
              show_default=True,
              help="loop: the decode loop in-process; run: the whole `macprof run` path against the engine's "
                   "own benchmark in its own process (llama.cpp: needs --llama-bench); speculative: macprof's "
                   "speculative loop against the engine's own (needs --draft).")
@declared_option("draft")
@declared_option("draft_tokens", kind="int", default=4, show_default=True,
                 help="With --path speculative: tokens drafted per round (k; at most --gen-tokens - 2).",
                 why="the benchmark times one draft length against the engine's own, not run's sweep of them")
@declared_option("ngram")
@declared_option("gen_tokens", kind="int", help="Generated tokens per request, EOS ignored [{gen_tokens}].",
                 why="one length: the benchmark's requests make no grid")
@declared_option("depths", "--depth", "depth", kind="int", default=256, show_default=True,
                 help="KV depth (prompt tokens) before decoding.",
                 why="one depth, the prompt each request decodes after: not run's sweep of depths")
@click.option("--pairs", type=click.IntRange(1, INT_MAX), default=7, show_default=True,
              help="Alternating macprof/reference pairs.")
@declared_option("reps")
@declared_option("threads")
@click.option("--llama-bench", "llama_bench", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="A llama-bench binary (benchmarks/build_llama_bench.sh): the loop's reference instead of the "
                   "in-process tg loop, and the full path's reference.")
@declared_option("endpoint", help="A running server: macprof's whole server path against a minimal streaming client "
                                  "on the same prompts (--depth prompt tokens, --gen-tokens, --reps per side and pair).",
                 why="the benchmark measures macprof's server path against a client, not the server as a model")
@declared_option("served_model")
@declared_option("api", choices=tuple(a for a in APIS if a != "ollama"), default="completions", show_default=True,
                 help="With --endpoint or --serve: the server's API.",
                 why="the minimal client the server path is timed against speaks no Ollama; --serve's server too")
@declared_option("serve", help="Start that server on MODEL (as `macprof run --serve`), then measure it as --endpoint "
                               "does.", why="the server started is measured as --endpoint is here, not as a model")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_context
def overhead(ctx, refs, engine, config_path, names, which, draft, draft_tokens, ngram, gen_tokens, depth, pairs, reps,
             threads, llama_bench, endpoint, served_model, api, serve, as_json) -> None:
    """Benchmark: does macprof slow what it measures? Median of paired ratios against each engine's own loop."""
    import json as _json

    if endpoint or serve:
        from macprof.cli.serve import server_overhead

        results = server_overhead(endpoint, served_model, api, serve, gen_tokens, depth, pairs, reps, threads, refs,
                                  progress=lambda s: click.echo(s, err=True))
        if as_json:
            click.echo(_json.dumps(results, indent=1))
        else:
            from macprof.bench.server import table as server_table

            click.echo(server_table(results))
        return
    from macprof.bench import fullpath, loop
    from macprof.bench.fullpath import table as bench_table
    from macprof.cli.models import ensure_demo_models, selected_models
    from macprof.config.settings import RunArgs

    chosen = [] if refs else RunArgs(names=names).model_names
    selected = selected_models(ctx, refs, engine, config_path, chosen, None)
    ensure_demo_models(selected)
    say = lambda s: click.echo(s, err=True)  # noqa: E731
    results = []
    if which == "speculative":
        from macprof.bench.speculative import speculative_overhead
        from macprof.config import draft_room_refusal

        refusal = draft_room_refusal(gen_tokens, [draft_tokens], "--gen-tokens", "--draft-tokens")
        if refusal:
            raise MacprofError(f"overhead: {refusal}")

        results = [speculative_overhead(m, draft, draft_tokens, ngram, gen_tokens, depth, pairs, threads, say)
                   for m in selected]
    elif draft:
        raise MacprofError("overhead: --draft applies to --path speculative")
    for m in selected if which != "speculative" else ():
        if which in ("loop", "both"):
            results.append(loop.measure(m.engine, m.path, gen_tokens, depth, pairs, threads, llama_bench, progress=say))
        if which in ("run", "both"):
            if m.engine == "llama.cpp" and llama_bench is None:
                say(f"{m.name}: full path skipped: its reference is llama-bench (pass --llama-bench PATH)")
                continue
            results.append(fullpath.measure(m, Path(config_path), gen_tokens, depth, pairs, fullpath.threads_for(m, threads),
                                            reps, llama_bench, progress=say))
    if as_json:
        click.echo(_json.dumps(results, indent=1))
        return
    click.echo(bench_table(results))
    if which == "speculative":
        from macprof.bench.speculative import notes

        for line in notes(results):
            click.echo(line)


def _add_commands() -> None:
    """The commands of their own modules (each imports no more than names at its top)."""
    from macprof.cli import results
    from macprof.cli.doctor import doctor
    from macprof.cli.models import models

    main.add_command(models)
    main.add_command(doctor)
    for command in (results.export, results.collect, results.board, results.verify):
        main.add_command(command)


_add_commands()

if __name__ == "__main__":
    main()
