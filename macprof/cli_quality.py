"""The quality phase's options of `macprof run` (kept apart from cli.py, which is near its size
limit): tokens scored, chunk length, the reference model, the text."""

from __future__ import annotations

from pathlib import Path

import click

_OPTIONS = (
    click.option("--quality-tokens", type=int, help="quality: tokens scored, in whole chunks [2048]."),
    click.option("--quality-ctx", type=int, help="quality: chunk length; its second half is scored [512]."),
    click.option("--reference", help="quality: the model the others are compared with [the highest-precision one]."),
    click.option("--text", "quality_text", type=click.Path(path_type=Path, exists=True, dir_okay=False),
                 help="quality: a UTF-8 text file to score [the text shipped with macprof]."),
)


QUALITY_OPTIONS = ("quality_tokens", "quality_ctx", "reference", "quality_text")  # their parameter names


def quality_options(f):
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


def quality_overrides(quality_tokens, quality_ctx, reference, quality_text) -> dict:
    return {"quality_tokens": quality_tokens, "quality_ctx": quality_ctx, "reference": reference,
            "text": str(quality_text.resolve()) if quality_text else None}
