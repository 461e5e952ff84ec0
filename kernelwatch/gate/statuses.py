"""The verdict vocabulary, one table: every status the gate gives a case
(``kernelwatch.gate.judge.CaseVerdict.status``), what the gate does with it, whether ``kernelwatch confirm`` re-measures
it, and how the reports and the dashboard name, order and colour it. The gate, the reports, the dashboard and confirm
read it from here; nothing else spells a label (tests/test_statuses.py checks). Plain data, no imports beyond the
standard library.

A few labels name no status of the gate: a reader's refinement of one (``refines``): a passing case at least its
minimum effect faster is "faster" or "faster (within noise)" (``kernelwatch.gate.reports.label``), and a slowdown a
newer run no longer shows is "slower (resolved)" on the dashboard (``kernelwatch.dashboard.verdicts``).
"""

from __future__ import annotations

from dataclasses import dataclass

GATE_FAIL, GATE_WARN, GATE_PASS = "fail", "warn", "pass"  # what a case of the status does to the gate's exit

# Table cell fills and line colours (the dashboard's; red, amber, green, violet).
RED_FILL, AMBER_FILL, GREEN_FILL, VIOLET_FILL = "#f8d0d0", "#fbeec2", "#d3efd9", "#e7dcf3"
RED_LINE, AMBER_LINE, VIOLET_LINE = "#C00000", "#C98A00", "#7F3C8D"


@dataclass(frozen=True)
class Status:
    """One row of the table.

    * ``name``: the status (``CaseVerdict.status``), or the row's key when it ``refines`` one;
    * ``label``: what every report and page calls it (``kernelwatch.gate.reports.LABELS``; the README and tests quote
    them);
    * ``gate``: GATE_FAIL (exit 1), GATE_WARN (reported as a warning) or GATE_PASS;
    * ``confirmable``: a perf verdict ``kernelwatch confirm`` re-measures and a stored confirmation decides;
    * ``css``: the HTML report's row class; ``icon``: the Markdown report's; ``fill`` / ``line``: the dashboard's
      table fill and sparkline colour ("": none, neutral);
    * ``refines``: the status this label refines (None: the row is a status of the gate).

    The table's order is the severity order: most severe first.
    """

    name: str
    label: str
    gate: str
    confirmable: bool = False
    css: str = ""
    icon: str = ""
    fill: str = ""
    line: str = ""
    refines: str | None = None


ACCURACY_FAILED = "accuracy"  # error budget over 1, NaN/Inf where the reference has values, or a stored row disagrees
ERROR = "error"  # the case raised, hung or crashed
MISSING = "missing"  # the baseline measured it, the candidate did not
RETIRED = "retired"  # the baseline measured it, the checked-out specs no longer define it: fails until acknowledged
UNMEASURED = "unmeasured"  # no measurement, or timed on a machine slower than any of its model
UNRELIABLE = "unreliable"  # the samples absorbed host delay
REGRESSION = "regression"  # a significant slowdown past the minimum effect
RESOLVED = "resolved"  # (dashboard) a slowdown a newer run of the same hardware no longer shows
# a slowdown past the minimum effect the runs alone cannot decide (kernelwatch.gate.rules.undecided_by_the_runs)
SUSPECT = "suspect"
ACCURACY_WARNING = (
    "warning"  # the error budget grew past kernelwatch.gate.judge.BUDGET_GROWTH_WARNING x, still within tolerance
)
ACKNOWLEDGED = "acknowledged"  # a regression `kernelwatch ack` recorded
NOISY = "noisy"  # slower past the minimum effect, within the case's noise
MACHINE = "machine"  # slower with its same-run reference: the machine, not the kernel
NEW = "new"  # no baseline to compare with
REBASELINED = "rebaselined"  # timed another way than the baseline (calls per sample): a new measurement, not a speed
FASTER = "faster"  # (reports) a passing case faster past the minimum effect, its swapped test significant
FASTER_NOISY = "faster_noisy"  # (reports) a passing case faster past the minimum effect, not significantly
PASS = "pass"

TABLE: tuple[Status, ...] = (
    Status(ACCURACY_FAILED, "accuracy failed", GATE_FAIL, css="bad", icon="❌", fill=RED_FILL, line=RED_LINE),
    Status(ERROR, "errored", GATE_FAIL, css="bad", icon="❌", fill=RED_FILL, line=RED_LINE),
    Status(MISSING, "missing", GATE_FAIL, css="bad", icon="❌", fill=RED_FILL, line=RED_LINE),
    Status(RETIRED, "retired (acknowledge)", GATE_FAIL, css="bad", icon="🗑️", fill=RED_FILL, line=RED_LINE),
    Status(UNMEASURED, "unmeasured", GATE_FAIL, css="bad", icon="❌", fill=RED_FILL, line=RED_LINE),
    Status(UNRELIABLE, "unreliable", GATE_FAIL, True, css="bad", icon="❌", fill=RED_FILL, line=RED_LINE),
    Status(REGRESSION, "slower", GATE_FAIL, True, css="bad", icon="❌", fill=RED_FILL, line=RED_LINE),
    Status(RESOLVED, "slower (resolved)", GATE_FAIL, fill=VIOLET_FILL, line=VIOLET_LINE, refines=REGRESSION),
    Status(SUSPECT, "suspect (confirm)", GATE_FAIL, True, css="bad", icon="🔍", fill=RED_FILL, line=RED_LINE),
    Status(ACCURACY_WARNING, "accuracy warning", GATE_WARN, css="warn", icon="⚠️", fill=AMBER_FILL, line=AMBER_LINE),
    Status(ACKNOWLEDGED, "acknowledged", GATE_PASS, css="ack", icon="☑️", fill=VIOLET_FILL, line=VIOLET_LINE),
    Status(NOISY, "slower (within noise)", GATE_WARN, css="warn", icon="〰️", fill=AMBER_FILL, line=AMBER_LINE),
    Status(MACHINE, "machine", GATE_WARN, css="warn", icon="🖥️"),
    Status(REBASELINED, "re-baselined: timing changed", GATE_PASS, css="ok", icon="↪️"),
    Status(NEW, "new", GATE_PASS, css="ok", icon="🆕"),
    Status(FASTER, "faster", GATE_PASS, css="ok", icon="✅", fill=GREEN_FILL, line="#1A7F37", refines=PASS),
    Status(
        FASTER_NOISY,
        "faster (within noise)",
        GATE_PASS,
        css="ok",
        icon="〰️",
        fill=GREEN_FILL,
        line="#2E8B57",
        refines=PASS,
    ),
    Status(PASS, "unchanged", GATE_PASS, css="ok", icon="✅"),
)
ROWS: dict[str, Status] = {s.name: s for s in TABLE}

# The gate's statuses (the rows that refine none), and what the gate does with each.
STATUSES = tuple(s.name for s in TABLE if s.refines is None)
FAILING = tuple(s.name for s in TABLE if s.refines is None and s.gate == GATE_FAIL)
WARNING = tuple(s.name for s in TABLE if s.refines is None and s.gate == GATE_WARN)
CONFIRMABLE = tuple(s.name for s in TABLE if s.confirmable)  # perf verdicts a same-device re-measurement settles
# What a reader calls each status, and every label most severe first (a status not listed shows its own name).
LABELS = {s.name: s.label for s in TABLE if s.refines is None}
SEVERITY = tuple(s.label for s in TABLE)


def label_of(name: str) -> str:
    """The label of a row (a status or a refinement of one); an unknown name is its own label."""
    row = ROWS.get(name)
    return row.label if row is not None else name


# How a reader sees a count and a p-value, on every page and in every report.
P_FLOOR = 1e-6  # below it a p-value's digits say nothing more (the test's own assumptions are coarser)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 run``, ``2 runs``."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def p_value(p: float) -> str:
    """A p-value as people read it: ``0.012``, ``3e-05``, ``< 1e-6``."""
    return f"< {P_FLOOR:.0e}".replace("e-06", "e-6") if p < P_FLOOR else f"{p:.2g}"


def p_text(p: float) -> str:
    """``p=0.012``, ``p < 1e-6``."""
    shown = p_value(p)
    return f"p {shown}" if shown.startswith("<") else f"p={shown}"
