"""One side of ``kernelwatch confirm``: a process that imports one commit's kernels and times its cases on request.

    PYTHONPATH=TREE python DRIVER/collector/confirm_worker.py DRIVER/collector/backends.py DEVICE [EXTRA_MODULE...]

Run from the confirming checkout's copy of this file, with ``PYTHONPATH`` and the working directory set
to the checked-out tree of one commit: ``kernels`` (and the extra modules) come from that tree, the
timing (``Backend``, loaded by file path from ``DRIVER/collector/backends.py``) from the driver, so both
sides of a comparison are timed by the same code whatever their commits hold.

Protocol: one JSON object per line on stdin; each answer is one line on stdout prefixed with
:data:`REPLY` (anything else a kernel prints is ignored by the driver).

* ``{"op": "setup", "cases": [{"key": K, "seed": S}, ...]}``: build each case's inputs (the collector's
  seeded inputs: ``spec.make_inputs(case, device, seed)``) and kernel call, call it once (compile,
  autotune); answers ``{"tree": kernelwatch/kernels/__init__.py, "missing": [keys this tree lacks], "errors": {...},
  "sizes": {key: [bytes moved, FLOPs]}}``.
* ``{"op": "measure", "key": K, "rep_ms": R[, "method": M][, "calls": N]}``: ``Backend.device_samples`` of the
  case's kernel, L2 flushed, by method M (``auto`` when absent, else ``graph`` or ``events``), N back-to-back
  calls per sample (1 when absent; the driver's ``perf.launch_batch`` of the setup's sizes); answers
  ``{"median_ms": ..., "samples": n, "timing": "graph"|"graph-batch"|"events"}``, or ``{"error": ...}``.
* ``{"op": "quit"}``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
from typing import Any

REPLY = "KWCONFIRM "


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _load_backend(path: str):
    """The driver's ``Backend`` module, with the driver's ``kernelwatch.kernels.names`` under it (the timing
    methods it names): the commit's own ``names`` may predate one. The commit's kernels import their own
    ``names`` afterwards."""
    names = "kernelwatch.kernels.names"
    _load(names, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))), "kernels", "names.py"))
    try:
        return _load("kernelwatch_confirm_backends", path)
    finally:
        del sys.modules[names]


def _reply(obj: dict[str, Any]) -> None:
    sys.stdout.write(REPLY + json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    backends_path, device, *extra = argv
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # the script's folder is no tree
    backends = _load_backend(backends_path)
    import torch

    backend = backends.Backend(torch.device(device), time_on_cpu=device.startswith("cpu"))
    backend.activate()
    from kernelwatch import kernels
    from kernelwatch.kernels.spec import KERNEL_IMPL

    specs = kernels.discover(tuple(extra))
    calls: dict[str, Any] = {}
    sizes: dict[str, list[int]] = {}
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "quit":
            break
        if msg["op"] == "setup":
            by_key = {c.key: (spec, c) for spec in specs.values() for c in spec.perf_cases()}
            missing, errors = [], {}
            for item in msg["cases"]:
                if item["key"] not in by_key:
                    missing.append(item["key"])
                    continue
                spec, case = by_key[item["key"]]
                try:
                    inputs = spec.make_inputs(case, backend.device, item["seed"])
                    fn = spec.implementations(case, inputs)[KERNEL_IMPL]
                    fn()
                    backend.synchronize()
                    calls[item["key"]] = fn
                    sizes[item["key"]] = [spec.bytes_moved(case), spec.flops(case)]
                except Exception as exc:
                    first = (str(exc).strip().splitlines() or [""])[0]
                    errors[item["key"]] = f"{type(exc).__name__}: {first[:200]}"
            _reply({"tree": os.path.abspath(kernels.__file__), "missing": missing, "errors": errors, "sizes": sizes})
        elif msg["op"] == "measure":
            try:
                samples, timing = backend.device_samples(
                    calls[msg["key"]],
                    warmup_ms=msg["rep_ms"] / 4,
                    rep_ms=msg["rep_ms"],
                    min_reps=5,
                    method=msg.get("method", "auto"),
                    calls=msg.get("calls", 1),
                )
            except Exception as exc:  # a forced graph whose capture failed this time
                _reply({"error": f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"})
                continue
            _reply({"median_ms": statistics.median(samples), "samples": len(samples), "timing": timing})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
