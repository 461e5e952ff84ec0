"""Stored confirmations (``kernelwatch confirm --db``) as the one line each the Triage and case pages show:
``confirmed SLOWER on GPU-1234abcd: ×1.062 [1.055, 1.067], 12 rounds``
(``kernelwatch.store.schema.Confirmation.describe``)."""

from __future__ import annotations

import streamlit as st
from sqlalchemy import Engine

from kernelwatch.dashboard.safe import md
from kernelwatch.store import queries
from kernelwatch.store.schema import Confirmation

SHOWN = 20  # newest lines on a page


def lines(eng: Engine, fingerprint: str, case: str | None = None, commit: str | None = None) -> list[str]:
    """Newest first: the confirmations on one hardware of ``case`` (any commits) or of ``commit`` (any case),
    each "case (or commits): confirmed ..."."""
    rows = queries.confirmations(eng, fingerprint, [case] if case else None, candidate_commit=commit)
    out = []
    for row in reversed(rows[-SHOWN:]):
        what = (
            f"{row['candidate_commit'][:8]} vs {row['baseline_commit'][:8]}"
            if case
            else f"{row['case']} (vs {row['baseline_commit'][:8]})"
        )
        out.append(f"{what}: {Confirmation.model_validate(row).describe()}")
    return out


def show(eng: Engine, fingerprint: str, case: str | None = None, commit: str | None = None) -> None:
    """The lines of :func:`lines` as captions under a small heading; nothing when there are none."""
    found = lines(eng, fingerprint, case, commit)
    if found:
        st.caption("Confirmed on one device (kernelwatch confirm):")
        for line in found:
            st.caption(md(line, limit=400))
