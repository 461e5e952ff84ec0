"""The worker process: owns one device, runs one case at a time for the parent.

A case that raises is answered with its error and the worker goes on. A case that kills the
process (an illegal memory access, a segfault) or hangs is dealt with by the parent, which
records it and starts a fresh worker: the device context of a crashed process is not trusted.

A worker never outlives its parent: a watchdog thread sees the parent go (the worker is
re-parented) and ends the process at once, even in the middle of a case, and a closed pipe ends
the message loop; either way quietly, without a traceback.

Every reply carries ``phases``: seconds per phase of the work since the previous reply (start-up,
ceilings, accuracy, perf inputs / warm-up / timing / per-call / memory).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
import warnings
from dataclasses import asdict
from multiprocessing.connection import Connection
from typing import Any

from kernelwatch.kernels.names import KERNEL_IMPL

WorkItem = tuple[str, str]  # (suite, case key)
PARENT_POLL_S = 0.5


def describe_error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:500]


def _exit_with_parent(parent: int) -> None:
    """End this process as soon as ``parent`` is no longer its parent (it died and we were re-parented)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="kernelwatch-parent-watch", daemon=True).start()


def _limit_threads(threads: int) -> None:
    """Share the host's cores among the workers (before torch is imported: OpenMP sizes its pool once).

    Every worker left at the default would run one CPU thread per core, so N workers oversubscribe
    the host N times over in the CPU parts of a case (input generation, float64 references, compilation).
    A user's own OMP_NUM_THREADS wins.
    """
    if threads > 0 and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(threads)
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", str(threads))


def worker_main(conn: Connection, config: dict[str, Any]) -> None:
    """Serve the parent over ``conn`` until it says stop or goes away.

    ``config``: device (torch device string), label (its name in results), extra_modules, explore
    ((base, seeds) of the exploration items ("explore", key), see kernelwatch.collect.accuracy), threads
    (CPU threads for this worker; 0 leaves the default), time_on_cpu, parent (pid).
    """
    started = time.perf_counter()
    _exit_with_parent(config["parent"])
    try:
        _serve(conn, config, started)
    except (EOFError, BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        pass  # the parent closed the pipe or went away: nothing left to answer
    finally:
        conn.close()


def quiet_interpreter() -> None:
    """Silence NumPy's RuntimeWarnings raised inside Triton's interpreter.

    The interpreter runs every op with NumPy on every lane, masked-off lanes included (loaded as ``other``,
    often 0): a division there warns "divide by zero" about values the kernel never stores. What the kernel
    does store is checked against the float64 reference; the warnings only cluttered ``collect``'s output.
    Warnings from anywhere else (the kernels, the references) still show.
    """
    warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")


def _serve(conn: Connection, config: dict[str, Any], started: float) -> None:
    device = config["device"]
    if device.startswith("cpu"):
        os.environ["TRITON_INTERPRET"] = "1"
        quiet_interpreter()
    _limit_threads(config.get("threads", 0))
    import torch

    if config.get("threads", 0) > 0 and "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

    from pydantic import ValidationError

    from kernelwatch.collect.accuracy import case_seed, check_case, error_result, explore_case, explore_seed
    from kernelwatch.collect.backends import Backend
    from kernelwatch.collect.metadata import device_uuid, host_name
    from kernelwatch.collect.perf import BaselineCache, error_results, origin, perf_case
    from kernelwatch.kernels import discover
    from kernelwatch.store.schema import describe

    backend = Backend(torch.device(device), label=config["label"], time_on_cpu=config.get("time_on_cpu", False))
    backend.activate()
    backend.host = host_name()
    if backend.kind == "cuda":
        backend.device_uuid = device_uuid(torch.cuda.get_device_properties(backend.device.index or 0))
    if backend.kind == "cuda":
        _count_compiles(backend, tuple(config["extra_modules"]))
    specs = discover(tuple(config["extra_modules"]))
    index: dict[WorkItem, Any] = {}
    for spec in specs.values():
        for case in spec.accuracy_cases():
            index[("accuracy", case.key)] = (spec, case)
            index[("explore", case.key)] = (spec, case)
        for case in spec.perf_cases():
            index[("perf", case.key)] = (spec, case)
    baselines = BaselineCache()
    explore = tuple(config.get("explore", (0, 0)))
    backend.phases["startup"] += time.perf_counter() - started

    while True:
        msg = conn.recv()
        op = msg["op"]
        if op == "stop":
            # Tearing torch and Triton down takes seconds and saves nothing: the driver frees the device.
            sys.stdout.flush()
            sys.stderr.flush()
            conn.close()
            os._exit(0)
        if op == "describe":
            reply = _describe(backend)
            reply["phases"] = backend.take_phases()
            conn.send(reply)
            continue
        suite, key = msg["item"]
        spec, case = index[(suite, key)]
        begun = time.perf_counter()
        try:
            if suite == "accuracy":
                with backend.phase("accuracy"):
                    result: Any = check_case(spec, case, backend.device)
                errored = False
            elif suite == "explore":
                with backend.phase("exploration"):
                    result = explore_case(spec, case, backend.device, *explore)
                errored = False
            else:
                result = perf_case(spec, case, backend, msg["peaks"], baselines, case_seed(case))
                errored = any(r.implementation == KERNEL_IMPL and r.error for r in result)
        except Exception as exc:
            if isinstance(exc, ValidationError):  # a value the schema refuses is this case's error
                message = f"result refused by the schema: {describe(exc)}"[:500]
            else:
                message = describe_error(exc)
            if os.environ.get("KERNELWATCH_DEBUG"):
                traceback.print_exc()
            if suite == "accuracy":
                result = error_result(case, message)
            elif suite == "explore":
                result = error_result(case, message, explore_seed(case, explore[0], 1))
            else:
                result = error_results(spec, case, message, origin(backend))
            errored = True
        conn.send(
            {
                "item": (suite, key),
                "result": result,
                "errored": errored,
                "seconds": time.perf_counter() - begun,
                "phases": backend.take_phases(),
            }
        )
        sys.stderr.flush()


def _count_compiles(backend, extra_modules: tuple[str, ...]) -> None:
    """Count the project kernels' compilations in this worker as Triton's cache answered them
    (``compile.cached`` / ``compile.missed`` in the reply's phases; the parent takes them out of the
    seconds): after :mod:`kernelwatch.collect.precompile`, a miss is a launch it did not predict."""
    from triton import knobs

    def listen(*, src: Any, cache_hit: bool, **_: Any) -> None:
        module = getattr(getattr(getattr(src, "fn", None), "fn", None), "__module__", "") or ""
        if module.startswith("kernelwatch.kernels.") or module in extra_modules:
            backend.phases["compile.cached" if cache_hit else "compile.missed"] += 1

    knobs.compilation.listener = listen


def _describe(backend) -> dict[str, Any]:
    from kernelwatch.collect.metadata import hardware_info, sm_clock_mhz, software_versions
    from kernelwatch.kernels.device import describe

    index = backend.device.index or 0
    hw = hardware_info(backend.kind, index)
    with backend.phase("ceilings"):
        peaks = backend.measure_peaks()
    hw.update(peaks, sm_clock_mhz=sm_clock_mhz(backend.kind, index))  # after the ceilings: the clock under load
    plans = {k: v for k, v in asdict(describe(backend.device)).items() if not k.startswith("_")}
    where = {"device_uuid": backend.device_uuid, "host": backend.host}
    return {"hardware": hw, "versions": software_versions(), "peaks": peaks, "where": where, "plan_device": plans}
