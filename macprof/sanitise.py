"""The one sanitiser for text that came from outside macprof (a log, a model file, an
engine's message) on its way to a terminal, a table, markdown, SVG or HTML.

Kept outside the pipeline's stages so each may use it: run/progress.py prints model names and
engine messages, render/* prints logs, the CLI prints errors that quote them.
"""

from __future__ import annotations

import re

# Whole escape sequences, not just their ESC: removing only the ESC of "\x1b]8;;http://x\x1b\\"
# (an OSC 8 hyperlink) or "\x1b[2J" would print "]8;;http://x\" or "[2J". The 8-bit C1 forms
# (CSI 0x9b, OSC 0x9d, ST 0x9c...) are the same sequences to some terminals.
_ESCAPES = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"                         # CSI: colours, cursor moves, clears
    r"|(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"      # OSC: titles, hyperlinks (BEL or ST)
    r"|(?:\x1b[PX^_]|[\x90\x98\x9e\x9f])[^\x1b\x9c]*(?:\x1b\\|\x9c)?"  # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]?"                                          # any other ESC sequence
)


def clean(text) -> str:
    """One line, safe anywhere: escape sequences removed whole, every line break, tab or other
    space (\\n, \\r, NBSP, U+2028...) made a plain space, so a name never adds a row to a table
    or a line to the output, any other control or format character (BEL, NUL, bidi overrides)
    removed, and a URL's credentials (user:secret@) removed: an error that quotes --endpoint,
    a reference or a server's URL never prints them."""
    text = hide_credentials(_ESCAPES.sub("", str(text)))
    return "".join(" " if ch.isspace() else ch for ch in text if ch.isprintable() or ch.isspace())


def clean_lines(text) -> str:
    """Text of several lines (a report we built), each line cleaned: the line breaks stay."""
    return "\n".join(clean(line) for line in str(text).split("\n"))


# a URL's userinfo (user:secret@, up to the authority's last @: a password may hold one), what
# a URL is given with to reach a server, never what is shown
_CREDENTIALS = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://)[^/\s?#]*@")


def hide_credentials(text) -> str:
    """``text`` with every URL's user:password@ removed (every line ``clean`` makes)."""
    return _CREDENTIALS.sub(r"\1", str(text))
