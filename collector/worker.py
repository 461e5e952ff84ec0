"""The worker process: owns one device, runs one case at a time for the parent.

A case that raises is answered with its error and the worker goes on. A case that kills the
process (an illegal memory access, a segfault) or hangs is dealt with by the parent, which
records it and starts a fresh worker: the device context of a crashed process is not trusted.
"""

from __future__ import annotations

import os
import traceback
from multiprocessing.connection import Connection
from typing import Any

WorkItem = tuple[str, str]  # (suite, case key)


def describe_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:500]


def worker_main(conn: Connection, device: str, extra_modules: tuple[str, ...], explore: tuple[int, int],
                profile: bool) -> None:
    """``explore`` = (base, seeds) of the exploration items ("explore", key); see collector.accuracy."""
    if device.startswith("cpu"):
        os.environ["TRITON_INTERPRET"] = "1"
    import torch

    from collector.accuracy import check_case, error_result, explore_case, explore_seed
    from collector.backends import Backend
    from collector.perf import BaselineCache, error_results, perf_case
    from kernels import discover

    backend = Backend(torch.device(device))
    backend.activate()
    specs = discover(extra_modules)
    index: dict[WorkItem, Any] = {}
    for spec in specs.values():
        for case in spec.accuracy_cases():
            index[("accuracy", case.key)] = (spec, case)
            index[("explore", case.key)] = (spec, case)
        for case in spec.perf_cases():
            index[("perf", case.key)] = (spec, case)
    baselines = BaselineCache()

    while True:
        msg = conn.recv()
        op = msg["op"]
        if op == "stop":
            return
        if op == "describe":
            conn.send(_describe(backend))
            continue
        suite, key = msg["item"]
        spec, case = index[(suite, key)]
        from collector.accuracy import case_seed

        try:
            if suite == "accuracy":
                result: Any = check_case(spec, case, backend.device)
                errored = False
            elif suite == "explore":
                result = explore_case(spec, case, backend.device, *explore)
                errored = False
            else:
                result = perf_case(spec, case, backend, msg["peaks"], baselines, case_seed(case))
                errored = any(r["implementation"] == "triton" and r["error"] for r in result)
                if profile and not errored:
                    from collector.profiling import profile_case

                    result = {"perf": result, "profiler": profile_case(spec, case, backend, extra_modules)}
        except Exception as exc:  # noqa: BLE001 - any failure of a case is that case's result
            message = describe_error(exc)
            if os.environ.get("KERNELWATCH_DEBUG"):
                traceback.print_exc()
            if suite == "accuracy":
                result = error_result(case, message)
            elif suite == "explore":
                result = error_result(case, message, explore_seed(case, explore[0], 1))
            else:
                result = error_results(spec, case, message)
            errored = True
        conn.send({"item": (suite, key), "result": result, "errored": errored})


def _describe(backend) -> dict[str, Any]:  # noqa: ANN001
    from collector.metadata import hardware_info, software_versions

    hw = hardware_info(backend.kind)
    hw.update(backend.measure_peaks())
    return {"hardware": hw, "versions": software_versions()}
