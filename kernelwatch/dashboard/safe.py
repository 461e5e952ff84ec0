"""Text from a URL or the database, made inert for the two renderers the dashboard has.

Streamlit renders Markdown (links, images, ``:red[...]`` colour and ``:material/...:`` icon directives,
``$...$`` maths, emoji shortcodes) in titles, captions, alerts and widget labels; Plotly renders a subset
of HTML (``<a href>``, ``<b>``, ``<br>``) in every label, legend entry and hover text. Values reach a page
through one of these functions, through ``st.text`` / ``st.code`` (plain text), or as dataframe cells
(plain text); never through ``st.markdown`` or ``st.write`` as they are. Each also isolates the text's direction
(:func:`kernelwatch.store.schema.isolate`): a U+202E in a branch or device name never reverses the rest of the line.
"""

from __future__ import annotations

import html
import re

from kernelwatch.store.schema import isolate

# Every ASCII punctuation character: CommonMark renders a backslash-escaped one as itself, so the escaped
# text reads exactly as the value and none of it is syntax (links, images, emphasis, code, HTML,
# entities, tables, directives, maths).
_PUNCT = re.compile(r"([!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~])")
# GitHub-flavoured Markdown also turns bare "https://...", "www...." and "name@host.tld" into links after the
# escapes are resolved (Streamlit's renderer does): a zero-width space breaks each such run.
_AUTOLINK = re.compile(r"(?i)(?<=[a-z0-9])(?=://|@)|(?<=www)(?=\.)")


def md(value: object, limit: int = 300) -> str:
    """``value`` as Markdown that displays as its text (on one line, at most ``limit`` characters, its direction
    isolated), with a zero-width space where a bare URL or e-mail address would otherwise become a link."""
    text = " ".join(str(value).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return _PUNCT.sub(r"\\\1", _AUTOLINK.sub("\u200b", isolate(text)))


def plot(value: object) -> str:
    """``value`` as a Plotly label: its direction isolated, HTML-escaped (Plotly shows the entities as the
    characters)."""
    return html.escape(isolate(str(value)), quote=True)
