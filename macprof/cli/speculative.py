"""The command line's options for `macprof estimate --draft MODEL|ngram --acceptance A`
(kept here: cli/__init__.py holds the commands). `run --draft ...` measures speculative decoding:
that is the ``draft`` setting, declared with its flags in macprof/config/settings.py."""

from __future__ import annotations

import click

from macprof.cli.options import declared_option


def draft_options(f):
    """--draft / --acceptance / --draft-tokens for `macprof estimate`."""
    for option in reversed([
        declared_option("draft", dest="spec_draft"),
        click.option("--acceptance", "spec_acceptance", type=float,
                     help="With --draft: the per-token acceptance, 0 to 1 (the chance each drafted token is accepted)."),
        declared_option("draft_tokens", dest="spec_draft_tokens",
                        help="With --draft: tokens drafted per round, e.g. 1,2,4,8 [as `run --draft-tokens`: "
                             "{draft_tokens}].",
                        why="a prediction has no --gen-tokens to bound k by; its own bounds are analyse/estimate.py's"),
    ]):
        f = option(f)
    return f


def draft_arguments(spec_draft=None, spec_acceptance=None, spec_draft_tokens=None, kv_type: str = "f16") -> dict:
    """The options as analyse.estimate.estimate's arguments, the draft's reference resolved as
    MODEL's is (one line where it resolves to nothing) and its file read at ``kv_type``."""
    from macprof.analyse.estimate import NGRAM
    from macprof.cli.models import model_file
    from macprof.errors import MacprofError

    draft = spec_draft
    if draft is not None and draft.strip() != NGRAM:
        try:
            draft = model_file(draft, kv_type)
        except MacprofError as exc:
            raise MacprofError(f"estimate --draft: {exc}") from None
    elif draft is not None:
        draft = NGRAM
    return {"draft": draft, "acceptance": spec_acceptance, "draft_tokens": spec_draft_tokens}
