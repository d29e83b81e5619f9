"""Command-line values that need parsing beyond click's types: integer lists, numbers with a
suffix (8B, 1.5M), and the lengths / sweeps of `macprof run` as settings."""

from __future__ import annotations

import click


def csv_ints(ctx, param, value):
    if value is None:
        return None
    try:
        out = [int(v) for v in str(value).split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected an integer, got {value!r}") from None
    return out


def sweep_overrides(prompt_tokens, gen_tokens, shapes, depths, batches, phases_given: bool) -> dict:
    """Command-line lengths and sweeps -> settings. A list of lengths is a grid (its first value
    is also the length every other phase uses); without --phases, sweep options run only
    the sweeps they ask for, as llama-bench runs only its tests."""
    out: dict = {"prompt_tokens": prompt_tokens[0] if prompt_tokens else None,
                 "gen_tokens": gen_tokens[0] if gen_tokens else None,
                 "prompt_grid": prompt_tokens if prompt_tokens and len(prompt_tokens) > 1 else None,
                 "gen_grid": gen_tokens if gen_tokens and len(gen_tokens) > 1 else None,
                 "shapes": [x.strip() for x in shapes.split(",") if x.strip()] if shapes else None,
                 "depths": depths or None, "batches": batches or None}
    sweeps = [phase for phase, wanted in (("grid", out["prompt_grid"] or out["gen_grid"] or out["shapes"]),
                                           ("depth", out["depths"]), ("batch", out["batches"])) if wanted]
    if sweeps and not phases_given:
        out["phases"] = sweeps
    return out


def number(ctx, param, value):
    """Accepts 8e9, 8000000000, 8B, 70b, 1.5M, 500k."""
    if value is None:
        return None
    text = str(value).strip().replace("_", "")
    mult = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}.get(text[-1:].lower(), 1)
    try:
        return float(text[:-1] if mult != 1 else text) * mult
    except ValueError:
        raise click.BadParameter(f"expected a number such as 8e9 or 8B, got {value!r}") from None
