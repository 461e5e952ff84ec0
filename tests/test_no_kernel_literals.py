"""The gate, the dashboard and the command line know no kernel: no kernel, variant or implementation name of the
registry is spelled in their sources (code, strings, comments). What they need of a kernel comes from its spec's
facts (``kernelwatch.kernels.names.CaseFacts``) and the shared names of ``kernelwatch.kernels.names``; a fifth kernel,
or a team's own, is judged like the four built in."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from kernelwatch.kernels import discover, names
from kernelwatch.kernels.spec import case_facts

ROOT = Path(__file__).resolve().parents[1]
WATCHED = ("kernelwatch/gate", "kernelwatch/dashboard", "kernelwatch/commands")
TEXT = {tokenize.STRING, tokenize.COMMENT, tokenize.NAME} | {
    getattr(tokenize, t) for t in ("FSTRING_MIDDLE",) if hasattr(tokenize, t)
}


def registered_names() -> set[str]:
    """Every kernel, variant and implementation name the registry knows: the specs' names and variants, the
    implementations every kernel is timed with, the peers and same-run references the specs declare, and those their
    targets compare with."""
    specs = discover()
    found = set(specs) | {v for spec in specs.values() for v in spec.variant_names()}
    found |= set(names.IMPLEMENTATIONS) | set(names.PEER_IMPLS) | set(names.REFERENCE_LABELS)
    for facts in case_facts(specs).values():
        found |= set(facts.reference_names) | set(facts.peers)
    for spec in specs.values():
        for case in spec.perf_cases():
            if case.target is not None and case.target.max_ratio_to is not None:
                found.add(case.target.max_ratio_to[0])
    return found


def spelled(text: str, words: set[str]) -> list[tuple[int, str]]:
    """(line, name) of every registered name spelled whole in ``text``'s strings, comments and identifiers."""
    pattern = re.compile(
        r"(?<![\w-])(" + "|".join(sorted(map(re.escape, words), key=len, reverse=True)) + r")(?![\w-])"
    )
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in TEXT:
            out += [(tok.start[0], m.group(1)) for m in pattern.finditer(tok.string)]
    return out


def test_no_kernel_variant_or_implementation_name_in_the_gate_the_dashboard_or_the_commands() -> None:
    words = registered_names()
    assert {"triton", "torch_eager"} <= words and len(words) > 10, words  # the registry answered
    hits = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for folder in WATCHED
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, name in spelled(path.read_text(), words)
    ]
    assert not hits, "\n".join(hits)


def test_the_search_finds_a_name_in_a_string_a_comment_an_f_string_and_a_key_path() -> None:
    """The search itself: a literal in each place a gate module could hide one, and none in look-alikes."""
    words = {"mse_loss", "atomic", "cublas_linear"}
    text = (
        'REFERENCES = ("cublas_linear", EAGER)\n'
        "# the atomic variant\n"
        'x = f"{a}/mse_loss/{b}"\n'
        'y = "atomic-reduction, mse_loss_extra, an_atomic"\n'
    )
    assert spelled(text, words) == [(1, "cublas_linear"), (2, "atomic"), (3, "mse_loss")]
