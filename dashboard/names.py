"""Run names as the dashboard shows them: beside the run id, and escaped wherever text is rendered.

A run's name is the user's free text (``meta.json``, :mod:`dashboard.meta`). Streamlit renders titles,
captions and markdown as Markdown, so a name such as ``![x](http://host/pixel.png)`` would make every
viewer's browser fetch that image, and ``:red[...]`` or ``**`` would restyle the page: every name
goes through :func:`md` before it reaches Markdown, and through :func:`plain` before it reaches a
Plotly label (which understands a few HTML tags, links included).
"""
from __future__ import annotations

import html
import re
from pathlib import Path

from dashboard.meta import load_meta

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:=^])")


def md(text: str) -> str:
    """``text`` with every Markdown (and Streamlit directive) character backslash-escaped: shown as
    typed, never as a link, an image, emphasis or a colour."""
    return _MD_SPECIAL.sub(r"\\\1", str(text))


def plain(text: str) -> str:
    """``text`` safe for a Plotly label: its HTML-like tags shown as text, not followed."""
    return html.escape(str(text), quote=False)


def run_name(folder: Path | str | None) -> str:
    """The run's name ("" when it has none or the folder is unknown)."""
    return load_meta(folder)["name"] if folder else ""


def titled(run_id: str, folder: Path | str | None) -> str:
    """``name (run_id)`` for a run with a name, the bare id otherwise (plain text, not escaped)."""
    name = run_name(folder)
    return f"{name} ({run_id})" if name else run_id
