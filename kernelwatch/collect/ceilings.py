"""Ceilings of stored cases that their runs did not record, from the kernels' specs.

A case's ceiling (copy or read stream, ``KernelSpec.ceiling``) is written with the case by the collector.
Runs from before it was recorded (``ci/history`` has them) leave it NULL; :func:`fill_missing` sets it
for every such case whose kernel this checkout has, so the dashboard treats old and new runs alike.
"""

from __future__ import annotations

from sqlalchemy import Engine

from kernelwatch.store.ingest import set_ceilings
from kernelwatch.store.queries import cases_without_ceiling


def fill_missing(engine: Engine, extra_modules: tuple[str, ...] = ()) -> int:
    """Set the ceiling of every stored case that has none and whose kernel is discovered; how many were set.
    Imports the kernels (torch) only when some case lacks its ceiling."""
    missing = cases_without_ceiling(engine)
    if not missing:
        return 0
    from kernelwatch.kernels import discover
    from kernelwatch.kernels.spec import Case

    specs = discover(extra_modules)
    found = {}
    for row in missing:
        spec = specs.get(row["kernel"])
        if spec is None:
            continue
        try:
            found[row["key"]] = spec.case_ceiling(
                Case.make(row["kernel"], row["variant"], row["dtype"], **(row["params"] or {}))
            )
        except (KeyError, TypeError, ValueError):  # params this spec does not know (an older or made-up case)
            continue
    set_ceilings(engine, found)
    return len(found)
