"""What a collector run is asked to do (:class:`Options`) and the work items it selects.

A work item is ``(suite, case key)``. The kernels come from :func:`kernels.discover`, called once per
selection; a filter (``--case``, ``--match``) that selects nothing is a usage error
(:class:`SelectionError`), never an empty "complete" run. With ``explore_seeds`` > 0 every selected
accuracy case is also an ("explore", key) item, after all the others.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelwatch.collect.worker import WorkItem

SUITES = ("accuracy", "perf")


class SelectionError(ValueError):
    """The kernels or cases asked for do not exist (a usage error: nothing was run)."""


@dataclass
class Options:
    kernels: tuple[str, ...] = ()
    suites: tuple[str, ...] = SUITES
    device: str = "auto"
    all_devices: bool = False
    case_timeout_s: float = 600.0
    trigger: str = "manual"
    ci_job: str | None = None
    extra_modules: tuple[str, ...] = ()
    match: str | None = None  # substring of the case key
    cases: tuple[str, ...] = ()  # exact case keys
    carried: tuple[str, ...] = ()  # kernels --changed-since skipped: none of their sources changed since ...
    carried_since: str | None = None  # ... this commit
    seed: int | None = None  # base of the exploration seeds (fresh when None)
    explore_seeds: int = 0
    profile: bool = False
    progress: bool = True
    command: str | None = None
    notes: list[str] = field(default_factory=list)
    time_on_cpu: bool = False  # run the perf suite on the interpreter too (tests of the perf path)
    run_id: str | None = None
    journal: Path | None = None  # where finished items are appended as they finish (None: no journal)


def resolve_device(requested: str) -> str:
    from kernelwatch.collect.backends import check_available, detect_device

    device = detect_device() if requested == "auto" else requested
    check_available(device)
    return device


def select_items(opts: Options) -> tuple[list[WorkItem], dict[WorkItem, Any]]:
    """The (suite, key) work items of the requested kernels and suites, with their cases."""
    from kernelwatch.kernels import discover
    from kernelwatch.project import ProjectError

    try:
        specs = discover(opts.extra_modules)
    except ProjectError as exc:
        raise SelectionError(str(exc)) from None
    unknown = [k for k in opts.kernels if k not in specs]
    if unknown:
        raise SelectionError(f"unknown kernel {unknown[0]!r}; known: {', '.join(sorted(specs))}")
    chosen = [specs[k] for k in (opts.kernels or tuple(sorted(specs)))]
    items: list[WorkItem] = []
    cases: dict[WorkItem, Any] = {}
    explore: list[WorkItem] = []
    known: set[str] = set()
    for spec in chosen:
        for suite in opts.suites:
            for case in spec.accuracy_cases() if suite == "accuracy" else spec.perf_cases():
                known.add(case.key)
                if (opts.match and opts.match not in case.key) or (opts.cases and case.key not in opts.cases):
                    continue
                item = (suite, case.key)
                if item not in cases:
                    items.append(item)
                    cases[item] = (spec, case)
                    if suite == "accuracy" and opts.explore_seeds > 0:
                        explore.append(("explore", case.key))
                        cases[explore[-1]] = (spec, case)
    _check_selection(opts, chosen, known, items)
    return items + explore, cases


def _suite_keys(chosen: list[Any], suite: str) -> set[str]:
    return {c.key for spec in chosen for c in (spec.accuracy_cases() if suite == "accuracy" else spec.perf_cases())}


def _check_selection(opts: Options, chosen: list[Any], known: set[str], items: list[WorkItem]) -> None:
    """A case filter that selects nothing is a typo or a case this commit does not have: say so, never
    write an empty "complete" run."""
    where = f"{', '.join(opts.kernels) or 'any kernel'} (suites: {', '.join(opts.suites) or 'none'})"
    if opts.match is not None and not opts.match:
        raise SelectionError("--match '': empty text would select every case; leave --match out to run them all")
    for key in opts.cases:
        if key not in known:
            other = [s for s in SUITES if s not in opts.suites and key in _suite_keys(chosen, s)]
            if other:
                raise SelectionError(
                    f"--case {key!r} is a case of the {other[0]} suite, which this run does not "
                    f"include (suites: {', '.join(opts.suites)})"
                )
            close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise SelectionError(f"--case {key!r}: no such case in {where}{hint}")
    if not items and (opts.match or opts.cases):
        what = f"--match {opts.match!r}" if opts.match else "--case"
        raise SelectionError(f"{what} selects no case of {where}")


def effective_suites(opts: Options) -> tuple[str, tuple[str, ...]]:
    """(device, the suites that run there): the perf suite is skipped in the CPU interpreter unless
    ``time_on_cpu``. Raises :class:`SelectionError` when nothing is left to run."""
    device = resolve_device(opts.device)
    if opts.time_on_cpu and device != "cpu":
        raise ValueError(f"--cpu-perf times the perf suite on the CPU interpreter; it cannot go with --device {device}")
    suites = opts.suites
    if device == "cpu" and not opts.time_on_cpu:
        suites = tuple(s for s in suites if s != "perf")
        if not suites:
            raise SelectionError(
                "nothing to run: the perf suite is skipped on cpu (Triton's interpreter: timings "
                "would mean nothing); add --suite accuracy, or run on a GPU or NPU"
            )
    return device, suites


def check_selection(opts: Options) -> None:
    """Everything a usage error could be, checked before anything is created (a database, a journal)."""
    _, suites = effective_suites(opts)
    select_items(Options(**{**opts.__dict__, "suites": suites}))
