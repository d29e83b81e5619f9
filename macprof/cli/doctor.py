"""`macprof doctor`: every figure source exercised on this machine (collect/doctor.py), as a
table or as JSON to paste into an issue."""

from __future__ import annotations

import click


@click.command()
@click.option("--model", "ref", help="Also a model (any reference `run` takes): its files' page-cache residency, "
                                     "and, a GGUF, its load on llama.cpp instead of the tiny demo model.")
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON (to paste into an issue).")
def doctor(ref, as_json) -> None:
    """Check every source macprof reads a figure from, on this machine: each row a value or the exact
    reason it failed, checked against an expectation where one exists. Exits 1 when a check fails."""
    import json
    import shutil

    from macprof.collect import doctor as dr
    from macprof.collect.machine import collect_machine
    from macprof.render.doctor import doctor_table

    files, label, gguf = [], "", None
    if ref:
        from macprof import config
        from macprof.collect import resolve

        model = resolve.specs((ref,), None, config.settings_for(None, None))[0]
        files, label = list(model.files), model.name
        gguf = model.path if model.engine == "llama.cpp" else None
    say = (lambda s: None) if as_json else (lambda s: click.echo(f"doctor: {s}...", err=True))
    checks = dr.run_checks(dr.Env(demo_gguf=_demo_gguf), files, label, gguf, progress=say)
    if as_json:
        machine = {k: v for k, v in collect_machine().items() if k != "host_id"}  # pasted publicly: no host id
        click.echo(json.dumps(dr.to_json(checks, machine), indent=1, default=str))
    else:
        click.echo(doctor_table(checks, shutil.get_terminal_size((160, 40)).columns))
    if any(c.status in ("fail", "error") for c in checks):
        raise SystemExit(1)


def _demo_gguf():
    """The tiny demo model's smallest GGUF, built once into macprof's cache (about 3 s)."""
    from macprof.demo import build

    root = build.default_dir()
    if not build.is_intact(root, "tiny"):
        click.echo("doctor: building the tiny demo models (first time only)...", err=True)
        build.build("tiny", root)
    return root / "gguf" / "demo-tiny-q4_k_m.gguf"
