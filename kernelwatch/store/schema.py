"""The run artifact, ``kernelwatch.run/1``: one typed model per record, the only definition of each.

The collector builds a :class:`RunDocument`, ``kernelwatch ingest`` validates one, the export and
the synthetic generator produce one, and ``kernelwatch schema`` prints its JSON Schema. Pure
pydantic: no SQLAlchemy, no torch, so a collector-only host can write artifacts.

Every limit here is one both databases honour, so an artifact gets the same answer on SQLite and
PostgreSQL: string lengths are those of the columns (``kernelwatch/store/models.py`` uses the same constants),
integers fit the column (32 or 64 bits), times are finite and non-negative (and ``-0.0`` is ``0.0``:
SQLite would store it so, PostgreSQL not), timestamps ordered and between 1970 and 9999, no text
carries NUL or a lone surrogate (PostgreSQL rejects both; SQLite would store them), ``params`` nest
at most :data:`MAX_PARAM_DEPTH` lists deep, a JSON object has no key twice.

Every refusal is one printable line, ``field.path: what is wrong``: field names that are not plain
identifiers are quoted (``run.versions["a.b"]``), and nothing from the artifact reaches a terminal
unescaped.

Fields added after the first release of ``kernelwatch.run/1`` (:data:`ADDED_FIELDS`) are optional;
an older artifact without them is still valid, and its content hash is unchanged (fields at their
default are left out of the hash). What an older artifact stated only in its run's notes (the GPU and the
host behind each perf result) is moved into those fields once, as it is read (:func:`upgrade_document`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
import threading
import unicodedata
import uuid as uuidlib
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kernelwatch.kernels.names import (
    CEILINGS,
    EAGER_IMPL,
    KERNEL_IMPL,
    LABELS,
    LAUNCH_BATCH,
    NOISE_ATOMIC,
    NOISE_GEMM,
    REFERENCE_LABELS,
    TIMING_GRAPH_BATCH,
    CaseFacts,
    launch_bound,
    work_class,
)

SCHEMA = "kernelwatch.run/1"
TRIGGERS = ("pr", "nightly", "manual")
STATUSES = ("running", "complete", "failed", "partial")
DEVICES = ("cuda", "npu", "cpu")
ACCURACY_KINDS = ("gate", "explore")

# Column sizes, shared with kernelwatch/store/models.py.
KEY_LEN = 255  # case keys, branch, CI job reference
NAME_LEN = 128  # device names, metric names
SHORT_LEN = 64  # kernel, variant, vendor, driver, toolkit, versions
TAG_LEN = 32  # dtype, implementation, units, ideals, device strings
TEXT_LEN = 65_536  # notes, commit subject, command, error messages
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
MAX_PARAM_DEPTH = 4
MAX_SAMPLES = 100_000
# A commit id as git prints it: 7-40 hex digits (a SHA-1 or a prefix), or 64 (a SHA-256 repository). Outside a
# checkout the collector records ``unknown`` (UNKNOWN_SHA): stored, shown, never handed to git.
COMMIT_SHA = re.compile(r"[0-9a-fA-F]{7,40}|[0-9a-fA-F]{64}")
UNKNOWN_SHA = "unknown"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


class ArtifactError(ValueError):
    """A run artifact that cannot be ingested; the message names the file and the field."""


class FieldError(ValueError):
    """A check that knows which field it is about: ``loc`` is relative to the record that runs it."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(f"{render_loc(loc)}: {message}")
        self.loc, self.message = loc, message


class HugeNumber:
    """A JSON integer Python refuses to convert (more than ``sys.get_int_max_str_digits()`` digits).

    It stays in the parsed document as this marker, so the model refuses it with its field path.
    """

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits"


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def printable(text: str) -> str:
    """``text`` with every non-printable character (newline, ESC, NUL, lone surrogates...) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


# Unicode's bidirectional classes (UAX #9) of the explicit embeddings, overrides and isolates: one U+202E
# (RIGHT-TO-LEFT OVERRIDE) in a branch name reverses everything after it on the line it is shown in.
_BIDI_CONTROLS = frozenset({"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"})
_RIGHT_TO_LEFT = frozenset({"R", "AL"})
FSI, PDI = "\u2068", "\u2069"  # FIRST STRONG ISOLATE ... POP DIRECTIONAL ISOLATE


def isolate(text: str) -> str:
    """Stored ``text`` that cannot change the direction of what is shown around it: its explicit bidirectional
    controls escaped (``\\u202e``, as :func:`printable` shows them) but for isolates that close inside it (text
    isolated once already), and text holding right-to-left letters (Hebrew, Arabic) wrapped in U+2068 ... U+2069,
    so it takes its own direction without reordering its neighbours. ASCII text comes back as it is."""
    if text.isascii():
        return text
    kinds = [unicodedata.bidirectional(c) for c in text]
    kept, opened = set(), []
    for i, kind in enumerate(kinds):
        if kind == "FSI":
            opened.append(i)
        elif kind == "PDI" and opened:
            kept.update((opened.pop(), i))
    shown = "".join(
        c.encode("unicode_escape").decode("ascii") if kind in _BIDI_CONTROLS and i not in kept else c
        for i, (c, kind) in enumerate(zip(text, kinds))
    )
    return f"{FSI}{shown}{PDI}" if _RIGHT_TO_LEFT.intersection(kinds) else shown


def render_loc(loc: tuple[str | int, ...]) -> str:
    """A field path: ``perf[3].median_ms``; a name that is not an identifier is quoted, ``params["a.b"]``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.fullmatch(part):
            out += f".{part}" if out else part
        else:
            shown = part if len(part) <= 60 else part[:57] + "..."
            out += "[" + json.dumps(shown, ensure_ascii=True) + "]"
    return out


# ---------------------------------------------------------------------------------------------
# Field types
# ---------------------------------------------------------------------------------------------
def _clean_text(value: str) -> str:
    if "\x00" in value:
        raise ValueError("text must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (a lone surrogate is not)") from None
    return value


def _nonblank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def format_time(value: dt.datetime) -> str:
    """The one textual form of a timestamp in artifacts: UTC, microseconds, trailing Z."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt.timezone.utc)
    return value.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str) -> dt.datetime:
    """An ISO 8601 timestamp with a time zone, in UTC, between 1970 and 9999."""
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        if parsed.tzinfo is None:
            raise ValueError
        parsed = parsed.astimezone(dt.timezone.utc)
    except (ValueError, OverflowError):
        raise ValueError("expected an ISO 8601 timestamp with a time zone, between 1970 and 9999") from None
    if parsed < _EPOCH:
        raise ValueError("expected a timestamp between 1970 and 9999")
    return parsed


def _timestamp(value: str) -> str:
    return format_time(parse_time(value))


def _commit_sha(value: str) -> str:
    if value != UNKNOWN_SHA and not COMMIT_SHA.fullmatch(value):
        raise ValueError(f"expected a commit sha (7-40 hex digits) or {UNKNOWN_SHA!r}, got {_shown(value)}")
    return value


def is_commit_sha(value: object) -> bool:
    """Whether ``value`` is a commit id git can be given (hex digits only: never an option, a path or a range)."""
    return isinstance(value, str) and COMMIT_SHA.fullmatch(value) is not None


def _uuid(value: str) -> str:
    if not _UUID.fullmatch(value):
        raise ValueError("expected a lower-case UUID")
    return value


def _text(max_length: int) -> Any:
    return Annotated[str, Field(max_length=max_length), AfterValidator(_clean_text)]


def _name(max_length: int) -> Any:
    return Annotated[
        str, Field(min_length=1, max_length=max_length), AfterValidator(_clean_text), AfterValidator(_nonblank)
    ]


Key = _name(KEY_LEN)
Name = _name(NAME_LEN)
Short = _name(SHORT_LEN)
Tag = _name(TAG_LEN)
Text = _text(TEXT_LEN)
ShortText = _text(SHORT_LEN)
Timestamp = Annotated[str, Field(max_length=64, json_schema_extra={"format": "date-time"}), AfterValidator(_timestamp)]
CommitSha = Annotated[
    str,
    Field(min_length=1, max_length=SHORT_LEN, json_schema_extra={"pattern": f"^({COMMIT_SHA.pattern}|{UNKNOWN_SHA})$"}),
    AfterValidator(_commit_sha),
]
RunId = Annotated[
    str, Field(json_schema_extra={"pattern": f"^{_UUID.pattern}$", "maxLength": 36}), AfterValidator(_uuid)
]
Count = Annotated[int, Field(ge=0, le=INT32_MAX)]
BigCount = Annotated[int, Field(ge=0, le=INT64_MAX)]
Seed = Annotated[int, Field(ge=-INT64_MAX, le=INT64_MAX)]


def _no_negative_zero(value: float) -> float:
    return value + 0.0  # -0.0 + 0.0 == +0.0: SQLite stores -0.0 as 0, PostgreSQL keeps the sign


Number = Annotated[float, Field(allow_inf_nan=False), AfterValidator(_no_negative_zero)]
NonNegative = Annotated[float, Field(ge=0, allow_inf_nan=False), AfterValidator(_no_negative_zero)]
Milliseconds = NonNegative
Samples = Annotated[list[NonNegative], Field(max_length=MAX_SAMPLES)]


def _param_value(value: Any, loc: tuple[str | int, ...], depth: int = 0) -> Any:
    """Scalars, or lists of them nested at most MAX_PARAM_DEPTH deep (shapes are lists of ints)."""
    if value is None or isinstance(value, (bool, int)):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > INT64_MAX:
            raise FieldError(loc, "integer out of the 64-bit range")
        return value
    if isinstance(value, HugeNumber):
        raise FieldError(loc, f"integer out of the 64-bit range ({value.digits} digits)")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FieldError(loc, "numbers must be finite")
        return value + 0.0
    if isinstance(value, str):
        if len(value) > KEY_LEN:
            raise FieldError(loc, f"at most {KEY_LEN} characters (got {len(value)})")
        try:
            return _clean_text(value)
        except ValueError as exc:
            raise FieldError(loc, str(exc)) from None
    if isinstance(value, list):
        if depth >= MAX_PARAM_DEPTH:
            raise FieldError(loc, f"lists nested deeper than {MAX_PARAM_DEPTH}")
        if len(value) > 64:
            raise FieldError(loc, f"at most 64 items (got {len(value)})")
        return [_param_value(v, (*loc, i), depth + 1) for i, v in enumerate(value)]
    raise FieldError(loc, "expected a string, number, boolean, null or list of those")


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------
class Record(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class Commit(Record):
    """The commit a run measured. ``sha`` and ``branch`` are ``unknown`` outside a git checkout.

    A sha is hex digits (:data:`COMMIT_SHA`) or ``unknown``: it is handed to git and shown in shell
    commands, so a value such as ``--output=/x`` or ``.`` is refused here, at ingest."""

    sha: CommitSha
    branch: Key
    time: Timestamp | None
    subject: Text | None
    dirty: bool | None


SUITES = ("accuracy", "perf")


class Scope(Record):
    """What a run set out to measure, as ``kernelwatch collect`` was asked: the gate expects of a candidate every case
    its checked-out specs define within this scope (``kernelwatch.gate.judge.expected_cases``).

    * ``suites``: the suites it ran;
    * ``kernels``: the kernels it selected (``--kernels``; None: every kernel of its specs);
    * ``match`` / ``cases``: its case filter (``--match TEXT``: keys holding TEXT; ``--case KEY``: those keys; none:
      every case);
    * ``carried`` / ``carried_since``: the kernels ``--changed-since`` skipped because none of their sources changed
      since that commit (the gate checks that against the tree before it excuses them)."""

    suites: list[Literal[SUITES]] = Field(max_length=len(SUITES))
    kernels: list[Key] | None = Field(default=None, max_length=4096)
    match: Key | None = None
    cases: list[Key] = Field(default_factory=list, max_length=65_536)
    carried: list[Key] = Field(default_factory=list, max_length=4096)
    carried_since: CommitSha | None = None


class RunInfo(Record):
    """One collector invocation. ``scope`` is what it set out to measure (:class:`Scope`; None: a run from before it
    was recorded whose notes say nothing of it)."""

    id: RunId
    commit: Commit
    trigger: Literal["pr", "nightly", "manual"]
    ci_job: _text(KEY_LEN) | None
    device: Literal["cuda", "npu", "cpu"]
    command: Text | None
    versions: dict[Short, ShortText | None] = Field(max_length=64)
    started_at: Timestamp
    finished_at: Timestamp | None
    status: Literal["running", "complete", "failed", "partial"]
    synthetic: bool
    notes: Text | None
    phases_s: dict[Short, NonNegative] | None = Field(
        default=None, max_length=64, description="Seconds spent in each phase of the run."
    )
    scope: Scope | None = None

    @model_validator(mode="after")
    def _ordered(self) -> RunInfo:
        if self.finished_at is not None and parse_time(self.finished_at) < parse_time(self.started_at):
            raise FieldError(("finished_at",), f"before started_at ({self.started_at})")
        return self


class Hardware(Record):
    """The machine. Identity (what decides performance: :data:`IDENTITY`) plus this run's context.

    Driver, toolkit, device count and the measured ceilings belong to the run: a driver update does
    not start a new history (conbench's ``info`` / ``optional_info`` split).
    """

    vendor: Short
    device_name: Name
    device_count: Count
    compute_units: Count | None
    memory_bytes: BigCount | None
    driver: ShortText | None
    toolkit: ShortText | None
    peak_gbps: NonNegative | None
    peak_gbps_datasheet: NonNegative | None
    peak_tflops: NonNegative | None
    peak_tflops_datasheet: NonNegative | None
    peak_read_gbps: NonNegative | None = Field(
        default=None, description="Measured read-only stream rate (GB/s); a read-mostly kernel's ceiling."
    )
    sm_clock_mhz: Count | None = Field(
        default=None,
        description="The first device's SM clock (MHz) as the run started, read right after its ceilings were "
        "measured (a clock under load, not the idle one); None on the CPU, on Ascend and where NVML is missing.",
    )


IDENTITY = ("vendor", "device_name", "compute_units", "memory_bytes")


class CaseInfo(Record):
    key: Key
    kernel: Short
    variant: Short
    dtype: Tag
    params: dict[Short, Any] = Field(max_length=64)
    ceiling: Literal[CEILINGS] | None = Field(
        default=None,
        description="The measured bandwidth that is the case's 100%: copy, or read for a "
        "read-only stream (from the kernel's spec); None in runs from before it was recorded.",
    )
    facts: dict[str, Any] | None = Field(
        default=None,
        description="What the kernel's spec declares about timing the case (kernelwatch.kernels.names.CaseFacts: "
        "noise class, launch-bound, calls per sample, same-run references, peers); None in runs from before it "
        "was recorded (recorded_facts reads theirs off their rows).",
    )

    @field_validator("facts", mode="after")
    @classmethod
    def _facts(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else CaseFacts.from_data(value).to_data()

    @field_validator("params", mode="after")
    @classmethod
    def _params(cls, value: dict[str, Any]) -> dict[str, Any]:
        return {k: _param_value(v, (k,)) for k, v in sorted(value.items())}


class AccuracyResult(Record):
    """error budget = max over elements of |out - ref| / (atol + rtol |ref|); <= 1 passes."""

    case: Key
    max_abs_err: NonNegative | None
    max_rel_err: NonNegative | None
    rtol: NonNegative
    atol: NonNegative
    error_budget: NonNegative | None
    nan_mismatches: Count
    trials: Count
    seed: Seed
    passed: bool
    error: Text | None
    kind: Literal["gate", "explore"] = Field(
        default="gate", description="gate: the fixed inputs of the case (decides verdicts); explore: fresh seeds."
    )


class PerfResult(Record):
    """One implementation of one case: GPU time per call (L2 flushed) and wall time per call."""

    case: Key
    implementation: Tag
    median_ms: Milliseconds | None
    p20_ms: Milliseconds | None
    p80_ms: Milliseconds | None
    min_ms: Milliseconds | None
    samples_ms: Samples
    bytes: BigCount | None
    flops: BigCount | None
    gbps: NonNegative | None
    tflops: NonNegative | None
    pct_peak: NonNegative | None
    speedup_vs_eager: NonNegative | None
    target: Text | None
    target_met: bool | None
    error: Text | None
    call_ms: Milliseconds | None = Field(
        default=None, description="Median wall time per call, calls issued back to back (host + device)."
    )
    call_samples_ms: Samples = Field(default_factory=list, description="Per batch: wall time / calls.")
    peak_mem_bytes: BigCount | None = Field(
        default=None, description="Allocator high-water mark over one call, above what was allocated before it."
    )
    device: _text(TAG_LEN) | None = Field(default=None, description="The device that measured it, e.g. cuda:1.")
    device_uuid: _text(NAME_LEN) | None = Field(
        default=None, description="The physical device behind the label: GPU UUID (GPU-...) or NPU serial."
    )
    host: _text(NAME_LEN) | None = Field(default=None, description="The host name of the machine that measured it.")
    timing: _text(TAG_LEN) | None = Field(
        default=None, description="How the GPU time was taken: graph (graph replay) or events (events behind a hold)."
    )
    host_probe_us: NonNegative | None = Field(
        default=None,
        description="Wall-timed cases: the host's microseconds per launch of a fixed Triton probe, median over "
        "probes taken after each sample (kernelwatch.collect.hostprobe); None where not wall-timed or from before.",
    )
    host_probe_samples_us: Samples = Field(
        default_factory=list, description="The host probe taken after each sample of samples_ms, in its order."
    )

    @model_validator(mode="after")
    def _ordered(self) -> PerfResult:
        """Quantiles of one sample: min <= p20 <= median <= p80 (to a relative 1e-9: interpolation rounds)."""
        names = ("min_ms", "p20_ms", "median_ms", "p80_ms")
        given = [(n, getattr(self, n)) for n in names if getattr(self, n) is not None]
        for (low_name, low), (high_name, high) in zip(given, given[1:]):
            if low - high > 1e-9 * high:
                raise FieldError((low_name,), f"{low!r} is larger than {high_name} {high!r}")
        probes, samples = len(self.host_probe_samples_us), len(self.samples_ms)
        if probes and probes != samples:
            raise FieldError(("host_probe_samples_us",), f"{probes} probes for {samples} samples (one after each)")
        return self


class ProfilerMetric(Record):
    case: Key
    source: Tag
    name: Name
    value: Number | None
    unit: _text(TAG_LEN) | None
    ideal: _text(TAG_LEN) | None
    meets_ideal: bool | None
    error: Text | None
    launch: _text(NAME_LEN) | None = Field(
        default=None,
        description="The kernel launch the counters were taken from (its name as the profiler "
        "reports it); None in runs from before it was recorded.",
    )


CONFIRM_VERDICTS = ("SAME", "NOT_SLOWER", "FASTER", "SLOWER", "UNKNOWN")
CONFIRM_SIDES = ("baseline", "candidate")


class ConfirmRound(Record):
    """One paired round of a confirmation: both commits' calls timed interleaved in one process (A, B, B, A, ...,
    the L2 flushed before each), the median of each side's calls, and what the device did meanwhile."""

    ratio: NonNegative = Field(description="candidate_ms / baseline_ms of this round.")
    baseline_ms: NonNegative
    candidate_ms: NonNegative
    first: Literal[CONFIRM_SIDES] = Field(description="The side whose call opened the round's A, B, B, A sequence.")
    timing: _text(NAME_LEN) = Field(
        description="How both sides were timed: graph, graph-batch, events, or wall (a stack's eager pass)."
    )
    sm_mhz: list[NonNegative] | None = Field(
        default=None, description="NVML SM clock as the round began and as it ended (None where NVML is missing)."
    )
    power_w: list[NonNegative] | None = Field(default=None, description="NVML board power (W), as for sm_mhz.")


class ConfirmDetail(Record):
    """What a confirmation measured, round by round, so that an UNKNOWN explains itself."""

    plans: dict[Literal[CONFIRM_SIDES], _text(TEXT_LEN)] = Field(
        description="Each side's kernel launches for the case: kernel[tile configuration] per launch."
    )
    measurement_ms: NonNegative | None = Field(default=None, description="Device time sampled per side and round.")
    case_seconds: NonNegative | None = Field(default=None, description="The case's time budget.")
    rounds: list[ConfirmRound]


class Confirmation(Record):
    """One case re-measured by ``kernelwatch confirm``: both commits on one device, interleaved, until the sign-test
    interval of the paired ratio (candidate / baseline) says SAME, NOT_SLOWER, FASTER or SLOWER, or the time budget
    or round limit leaves it UNKNOWN (``kernelwatch/collect/confirm.py``). A verdict about two commits on one
    hardware, not about a run: a run's artifact carries those of its commit (optional; runs written before hold
    none)."""

    case: Key
    baseline_commit: CommitSha
    candidate_commit: CommitSha
    verdict: Literal[CONFIRM_VERDICTS]
    rounds: Count
    ratio: NonNegative | None = Field(description="exp of the median paired log ratio, candidate / baseline.")
    low: NonNegative | None = Field(description="The interval of the ratio at the last look (low end).")
    high: NonNegative | None
    min_effect: NonNegative | None = Field(description="The gate's minimum effect: SLOWER needs half of it.")
    device_uuid: _text(NAME_LEN) | None = Field(description="The physical device both commits ran on.")
    seconds: NonNegative = Field(description="Time the case's measurements took (both commits, every round).")
    confirmed_at: Timestamp
    detail: ConfirmDetail | None = Field(default=None, description="Per-round data (None before migration 0010).")

    def describe(self) -> str:
        """One line: ``confirmed SLOWER on GPU-1234abcd: ×1.062 [1.055, 1.067], 12 rounds[, SM clock 1410-1890 MHz]``
        (the clock's range over the rounds where NVML read it)."""
        parts = (self.device_uuid or "an unrecorded device").split("-")
        where = "-".join(parts[:2]) if len(parts) > 2 else "-".join(parts)
        text = f"confirmed {self.verdict} on {where}"
        if self.ratio is not None:
            text += f": ×{self.ratio:.3f}"
            if self.low is not None and self.high is not None:
                text += f" [{self.low:.3f}, {self.high:.3f}]"
        text += f", {self.rounds} rounds"
        clocks = [mhz for r in (self.detail.rounds if self.detail else []) for mhz in r.sm_mhz or ()]
        return text + (f", SM clock {min(clocks):.0f}-{max(clocks):.0f} MHz" if clocks else "")


class RunDocument(Record):
    """A whole run: what ``kernelwatch collect --out`` writes and ``kernelwatch ingest`` reads."""

    model_config = ConfigDict(strict=True, extra="forbid", title="kernelwatch.run/1")

    schema_: Literal["kernelwatch.run/1"] = Field(alias="schema")
    run: RunInfo
    hardware: Hardware
    cases: list[CaseInfo] = Field(max_length=100_000)
    accuracy: list[AccuracyResult] = Field(max_length=100_000)
    perf: list[PerfResult] = Field(max_length=1_000_000)
    profiler: list[ProfilerMetric] = Field(max_length=1_000_000)
    confirmations: list[Confirmation] = Field(
        default_factory=list,
        max_length=100_000,
        description="Confirmations of this run's commit on this hardware (kernelwatch confirm); not the run's "
        "content: left out of its hash.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> RunDocument:
        _unique(self.cases, ("key",), "cases")
        _unique(self.accuracy, ("case", "kind"), "accuracy")
        _unique(self.perf, ("case", "implementation"), "perf")
        _unique(self.profiler, ("case", "source", "name"), "profiler")
        keys = {c.key for c in self.cases}
        for section in ("accuracy", "perf", "profiler"):
            for i, item in enumerate(getattr(self, section)):
                if item.case not in keys:
                    raise FieldError((section, i, "case"), f"{_shown(item.case)} is not listed in cases")
        used = {item.case for section in ("accuracy", "perf", "profiler") for item in getattr(self, section)}
        self.cases = sorted((c for c in self.cases if c.key in used), key=lambda c: c.key)
        self.accuracy.sort(key=lambda r: (r.case, r.kind))
        self.perf.sort(key=lambda r: (r.case, r.implementation))
        self.profiler.sort(key=lambda r: (r.case, r.source, r.name))
        _unique(self.confirmations, ("case", "baseline_commit", "confirmed_at"), "confirmations")
        for i, c in enumerate(self.confirmations):
            sha = self.run.commit.sha
            if not (c.candidate_commit.startswith(sha) or sha.startswith(c.candidate_commit)):
                raise FieldError(
                    ("confirmations", i, "candidate_commit"),
                    f"{_shown(c.candidate_commit)} is not the run's commit {_shown(sha)}",
                )
        self.confirmations.sort(key=lambda r: (r.case, r.confirmed_at, r.baseline_commit))
        return self


ADDED_FIELDS: dict[str, tuple[str, ...]] = {  # record -> fields added after the first release
    "run": ("phases_s", "scope"),
    "hardware": ("peak_read_gbps", "sm_clock_mhz"),
    "accuracy": ("kind",),
    "perf": (
        "call_ms",
        "call_samples_ms",
        "peak_mem_bytes",
        "device",
        "device_uuid",
        "host",
        "timing",
        "host_probe_us",
        "host_probe_samples_us",
    ),
    "cases": ("ceiling", "facts"),
    "profiler": ("launch",),
}

# The run-notes lines that named the physical devices before they were fields of each perf result
# (``collector`` wrote ``devices: cuda:0 = GPU-..., PCI 0000:19:00; cuda:1 = unknown`` and ``host: NAME``).
# An artifact or journal of that time is upgraded once, as it is read (:func:`upgrade_document`); the migration
# 0003 holds a frozen copy for databases of that time. Nothing writes these lines any more.
DEVICES_NOTE = "devices: "
HOST_NOTE = "host: "


def upgrade_document(data: Any) -> Any:
    """A parsed document as this version writes it: ``perf[].device_uuid`` and ``perf[].host`` of a run from
    before they were fields, and ``run.scope`` of a run from before it was (:func:`scope_from_notes`), from what its
    notes state (asv's ``update_to_2``). A result that states them
    keeps its own; a document of another shape is left as it is, for :func:`validate` to refuse."""
    run, perf = (data.get("run"), data.get("perf")) if isinstance(data, dict) else (None, None)
    if not isinstance(run, dict) or not isinstance(run.get("notes"), str) or not isinstance(perf, list):
        return data
    if run.get("scope") is None:
        scope = scope_from_notes(run["notes"])
        if scope is not None:
            data = {**data, "run": {**run, "scope": scope}}
    uuids, host = physical_from_notes(run["notes"])
    if not uuids and host is None:
        return data
    items = []
    for item in perf:
        if isinstance(item, dict):
            item = dict(item)
            if item.get("device_uuid") is None and isinstance(item.get("device"), str) and item["device"] in uuids:
                item["device_uuid"] = uuids[item["device"]]
            if item.get("host") is None and host is not None:
                item["host"] = host
        items.append(item)
    return {**data, "perf": items}


# The implementation names a run from before case facts were recorded used for its same-run references, preferred
# first, and the variant of KernelWatch's own atomic reduction then: what recorded_facts reads old runs with.
LEGACY_REFERENCES = ("cublas_linear", EAGER_IMPL)
LEGACY_ATOMIC_VARIANTS = ("atomic",)


def recorded_facts(doc: RunDocument) -> dict[str, CaseFacts]:
    """Per case key, the facts the run recorded (``CaseInfo.facts``); a case of a run from before they were, its
    facts as that run's code held them, read off its rows once, here: the noise class from its kernel timing's bytes
    and FLOPs (an atomic reduction by its variant), launch-bound and calls per sample from its size (or a
    graph-batch timing), references: those of LEGACY_REFERENCES it timed."""
    out: dict[str, CaseFacts] = {}
    timed: dict[str, set[str]] = {}
    kernel_rows = {}
    for p in doc.perf:
        timed.setdefault(p.case, set()).add(p.implementation)
        if p.implementation == KERNEL_IMPL:
            kernel_rows[p.case] = p
    for c in doc.cases:
        if c.facts is not None:
            out[c.key] = CaseFacts.from_data(c.facts)
            continue
        p = kernel_rows.get(c.key)
        nbytes, flops = (p.bytes, p.flops) if p is not None else (None, None)
        noise = work_class(nbytes, flops)
        if noise != NOISE_GEMM and c.variant in LEGACY_ATOMIC_VARIANTS:
            noise = NOISE_ATOMIC
        short = launch_bound(nbytes, flops) or (p is not None and p.timing == TIMING_GRAPH_BATCH)
        refs = [impl for impl in LEGACY_REFERENCES if impl in timed.get(c.key, ()) or impl == EAGER_IMPL]
        labels = {**LABELS, **REFERENCE_LABELS}
        out[c.key] = CaseFacts(noise, short, LAUNCH_BATCH if short else 1, tuple((impl, labels[impl]) for impl in refs))
    return out


def physical_from_notes(notes: str | None) -> tuple[dict[str, str], str | None]:
    """({label: device uuid}, host) as a run's notes state them (empty where they say nothing).

    Notes are joined with ``; `` (so are a devices line's entries): the devices line is what follows its
    last ``devices: ``, each entry ``LABEL = IDENT[, PCI ...]``."""
    notes = notes or ""
    uuids: dict[str, str] = {}
    at = notes.rfind(DEVICES_NOTE)
    if at >= 0:
        for label, ident in _DEVICE_ENTRY.findall(notes[at + len(DEVICES_NOTE) :]):
            if ident != "unknown":
                uuids[label] = ident
    host = _HOST_ENTRY.search(notes)
    name = host.group(1).strip() if host else None
    return uuids, None if name in (None, "", "unknown") else name


_DEVICE_ENTRY = re.compile(r"([a-z]+:\d+) = ([^,;\s]+)")
_HOST_ENTRY = re.compile(r"(?:^|; )host: ([^;]+)")

# ``kernelwatch collect --changed-since REF``: the kernels a run left out because none of their sources changed
# since REF (kernelwatch.collect.changes). The gate carries them over from the baseline
# (kernelwatch.gate.judge.carry_over).
SKIPPED_NOTE = "kernels skipped, unchanged since "
_SKIPPED = re.compile(r"(?:^|; )kernels skipped, unchanged since [^:;]*: ([^;]+)")


def skipped_note(since: str, kernels: list[str]) -> str:
    """The notes line naming the kernels a ``--changed-since`` run skipped (read by :func:`skipped_from_notes`)."""
    since = since.replace(":", " ").replace(";", " ")  # the line ends at ";", its list starts after ":"
    return f"{SKIPPED_NOTE}{since} (none of their sources changed): {', '.join(sorted(kernels))}"


def skipped_from_notes(notes: str | None) -> list[str]:
    """The kernels a run's notes say it skipped as unchanged (empty where they say nothing)."""
    match = _SKIPPED.search(notes or "")
    return [k.strip() for k in match.group(1).split(",") if k.strip()] if match else []


# A run with no case filter (no --match, no --case) measured every case its specs define in its suites; the
# gate reads that to tell a case the candidate's specs dropped (retired) from one it failed to measure.
WHOLE_NOTE = "every case of its specs "
_WHOLE = re.compile(rf"(?:^|; ){re.escape(WHOLE_NOTE)}\(([^)]*)\): ([^;]+)")


def whole_note(suites: list[str], kernels: list[str]) -> str:
    """The notes line of a run that measured every case of these kernels' specs in these suites."""
    return f"{WHOLE_NOTE}({', '.join(sorted(suites))}): {', '.join(sorted(kernels))}"


def whole_from_notes(notes: str | None) -> tuple[set[str], set[str]]:
    """(suites, kernels) a run's notes say it measured whole (empty where they say nothing)."""
    match = _WHOLE.search(notes or "")
    if not match:
        return set(), set()
    return (
        {s.strip() for s in match.group(1).split(",") if s.strip()},
        {k.strip() for k in match.group(2).split(",") if k.strip()},
    )


_SINCE_COMMIT = re.compile(r"(?:^|; )kernels skipped, unchanged since [^:;]*\(([0-9a-f]{7,40})\)")


def scope_from_notes(notes: str | None) -> dict[str, Any] | None:
    """The :class:`Scope` (as data) of a run from before it was a field, from its notes: the only place that reads
    them for it. Notes naming every case of its specs give those kernels and suites, unfiltered; a
    ``--changed-since`` line gives the skipped kernels (with no such line, every kernel and suite: a filter nobody
    recorded excuses nothing). None: the notes say nothing of its scope."""
    suites, kernels = whole_from_notes(notes)
    carried = skipped_from_notes(notes)
    if not kernels and not carried:
        return None
    since = _SINCE_COMMIT.search(notes or "")
    return {
        "suites": sorted(s for s in suites if s in SUITES) if kernels else list(SUITES),
        "kernels": sorted(kernels | set(carried)) if kernels else None,
        "match": None,
        "cases": [],
        "carried": sorted(carried),
        "carried_since": since.group(1) if since else None,
    }


def _unique(items: list[Record], fields: tuple[str, ...], section: str) -> None:
    seen: set[tuple[Any, ...]] = set()
    for i, item in enumerate(items):
        key = tuple(getattr(item, f) for f in fields)
        if key in seen:
            raise FieldError((section, i), f"duplicate {'/'.join(fields)} {_shown(key[0] if len(key) == 1 else key)}")
        seen.add(key)


# ---------------------------------------------------------------------------------------------
# Reading, writing, hashing
# ---------------------------------------------------------------------------------------------
def _shown(value: Any, limit: int = 60) -> str:
    """A value as it may appear in a message: repr, shortened, safe for a terminal."""
    try:
        text = repr(value)
    except RecursionError:
        return "a value nested too deeply to show"
    return printable(text if len(text) <= limit else text[: limit - 3] + "...")


def _message(err: dict[str, Any]) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if isinstance(value, HugeNumber):
        return f"out of range ({value!r})"
    if kind == "extra_forbidden":
        return f"unknown field (schema {SCHEMA})"
    if kind == "missing":
        return "missing field"
    if kind == "string_unicode":
        return "text must be valid Unicode (a lone surrogate is not)"
    if kind == "string_too_long":
        return f"at most {ctx['max_length']} characters (got {len(value)})"
    if kind in ("too_long", "too_short") and hasattr(value, "__len__"):
        bound = f"at most {ctx['max_length']}" if kind == "too_long" else f"at least {ctx['min_length']}"
        return f"{bound} items (got {len(value)})"
    if kind == "string_too_short":
        return "must not be empty"
    if kind in ("less_than_equal", "greater_than_equal"):
        sign = "<=" if kind == "less_than_equal" else ">="
        bound = ctx["le"] if kind == "less_than_equal" else ctx["ge"]
        return f"must be {sign} {bound}, got {_shown(value)}"
    if kind == "float_type" and isinstance(value, int) and not isinstance(value, bool):
        return f"out of the range of a 64-bit float, got {_shown(value)}"
    if kind in _MESSAGES:
        return f"{_MESSAGES[kind]}, got {_shown(value)}"
    if kind in ("value_error", "assertion_error"):
        return err["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return f"{err['msg'].replace('Input should be', 'expected')}, got {_shown(value)}"


_MESSAGES = {
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "int_type": "expected an integer",
    "bool_type": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "dict_type": "expected an object",
    "model_type": "expected an object",
    "finite_number": "expected a finite number",
}


def describe(exc: ValidationError) -> str:
    """The first problem of a validation error as one line: ``field.path: what is wrong``."""
    err = exc.errors(include_url=False)[0]
    loc = tuple(err["loc"])
    suffix = ""
    if loc and loc[-1] == "[key]":  # a key of a mapping (run.versions, params) is itself invalid
        loc, suffix = loc[:-1], " (the key)"
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        loc, msg = loc + tuple(cause.loc), cause.message
    else:
        msg = _message(err)
    loc = tuple("schema" if part == "schema_" else part for part in loc)
    return printable(f"{render_loc(loc) or '(document)'}{suffix}: {msg}")


def validate(doc: Any) -> RunDocument:
    """A parsed document (plain data) as a :class:`RunDocument`, or an :class:`ArtifactError`."""
    if not isinstance(doc, dict):
        raise ArtifactError(f"(document): expected a JSON object, got {_json_type(doc)}")
    if "schema" not in doc:
        raise ArtifactError("schema: missing field")
    if doc["schema"] != SCHEMA:
        raise ArtifactError(f"schema: unknown schema version {_shown(doc['schema'])} (this KernelWatch reads {SCHEMA})")
    try:
        return RunDocument.model_validate(upgrade_document(doc))
    except ValidationError as exc:
        raise ArtifactError(describe(exc)) from None
    except RecursionError:
        raise ArtifactError("(document): nested too deeply") from None


def _json_type(value: Any) -> str:
    names = {
        list: "an array",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
        int: "a number",
        float: "a number",
    }
    return names.get(type(value), type(value).__name__)


def _no_constants(name: str) -> float:
    raise ArtifactError(f"{name} is not valid JSON (non-finite numbers must be null)")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ArtifactError(f"duplicate key {_shown(key)} in one JSON object")
        out[key] = value
    return out


def _integer(digits: str) -> int | HugeNumber:
    try:
        return int(digits)
    except ValueError:  # more digits than sys.get_int_max_str_digits() allows
        return HugeNumber(len(digits.lstrip("-")))


MAX_ARTIFACT_BYTES = 512 * 1024 * 1024


def _on_fresh_stack(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a new thread, whose recursion depth starts at zero.

    The JSON decoder and the validator recurse once per nesting level until Python's recursion
    limit. Called from a fresh thread, the depth at which a deeply nested file is refused is the
    same wherever the parse is called from (a shallow command line, deep inside pytest or
    Streamlit), so the same file always gets the same message.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:
            box["error"] = exc

    worker = threading.Thread(target=run, name="kernelwatch-parse", daemon=True)
    worker.start()
    worker.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _parse(text: str, source: str) -> RunDocument:
    try:
        doc = json.loads(text, parse_constant=_no_constants, object_pairs_hook=_no_duplicates, parse_int=_integer)
    except ArtifactError as exc:
        raise ArtifactError(f"{source}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ArtifactError(f"{source}: not readable: JSON nested too deeply") from None
    try:
        return validate(doc)
    except ArtifactError as exc:
        raise ArtifactError(f"{source}: {exc}") from None


def parse_artifact(text: str, source: str = "<artifact>") -> RunDocument:
    """Parse and validate artifact text; every error is one line naming ``source`` and the field."""
    source = printable(source)
    if len(text) > MAX_ARTIFACT_BYTES:
        raise ArtifactError(f"{source}: larger than {MAX_ARTIFACT_BYTES >> 20} MiB")
    return _on_fresh_stack(_parse, text, source)


def to_data(doc: RunDocument) -> dict[str, Any]:
    """Plain JSON data of a document (``schema`` under its own name)."""
    return doc.model_dump(mode="json", by_alias=True)


def canonical(doc: RunDocument) -> dict[str, Any]:
    """The data that identifies a run's content: fields added later are left out at their default."""
    data = to_data(doc)
    defaults = {
        "run": RunInfo.model_fields,
        "hardware": Hardware.model_fields,
        "accuracy": AccuracyResult.model_fields,
        "perf": PerfResult.model_fields,
        "cases": CaseInfo.model_fields,
        "profiler": ProfilerMetric.model_fields,
    }
    for section, fields in ADDED_FIELDS.items():
        items = data[section] if isinstance(data[section], list) else [data[section]]
        for item in items:
            for name in fields:
                info = defaults[section][name]
                default = info.default_factory() if info.default_factory else info.default
                if item.get(name) == default:
                    item.pop(name, None)
    # A case's ceiling is its kernel's spec's fact (ingest fills it in for runs from before it was recorded),
    # not something the run measured: an old artifact and its export, which names the ceiling, hash alike.
    for item in data["cases"]:
        item.pop("ceiling", None)
        item.pop("facts", None)  # the spec's word too, stored per case as the ceiling is
    # Confirmations are verdicts about the run's commit reached later, not what the run measured.
    data.pop("confirmations", None)
    # The physical device a run's notes already state is not new content (runs from before the fields
    # existed get them from the notes): an old artifact and its export hash alike.
    if data["run"].get("scope") is not None and data["run"]["scope"] == scope_from_notes(doc.run.notes):
        data["run"].pop("scope")  # what the notes already state (upgrade_document): not new content
    uuids, host = physical_from_notes(doc.run.notes)
    for item in data["perf"]:
        if "device_uuid" in item and uuids.get(item.get("device")) == item["device_uuid"]:
            item.pop("device_uuid")
        if "host" in item and host is not None and item["host"] == host:
            item.pop("host")
    return data


def content_hash(doc: RunDocument) -> str:
    """SHA-256 of the canonical data of a validated document."""
    text = json.dumps(canonical(doc), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def dumps(doc: RunDocument | dict[str, Any]) -> str:
    """Artifact text: a document, or plain data as it is (tests write broken artifacts so)."""
    data = to_data(doc) if isinstance(doc, RunDocument) else doc
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n"


def hardware_fingerprint(hardware: Hardware | dict[str, Any]) -> str:
    """Stable id of a machine kind: what decides performance (:data:`IDENTITY`), nothing else."""
    data = hardware.model_dump() if isinstance(hardware, Hardware) else hardware
    ident = json.dumps([data.get(k) for k in IDENTITY], separators=(",", ":"))
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def json_schema() -> dict[str, Any]:
    """The JSON Schema of ``kernelwatch.run/1`` (for CI authors' own validators)."""
    schema = RunDocument.model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://kernelwatch.invalid/schema/kernelwatch.run-1.json"
    return schema


def new_run_id() -> str:
    return str(uuidlib.uuid4())
