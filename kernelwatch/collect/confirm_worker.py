"""The worker of ``kernelwatch confirm``: one process that loads two commits' kernels side by side and times
their calls of a case interleaved.

    python DRIVER/collector/confirm_worker.py DRIVER/collector/backends.py DEVICE [EXTRA_MODULE...]

The timing (``Backend``, loaded by file path from ``DRIVER/collector/backends.py``) comes from the driver, so
both sides are timed by the same code whatever their commits hold. Each side's tree is imported in turn with
only that tree on ``sys.path``: its ``kernelwatch`` package (and the extra modules) are imported, its cases'
inputs and calls built, and then its modules are taken out of ``sys.modules`` again (kept alive by the calls'
globals), so the next tree imports its own. The kernels do no imports at call time; Triton keys its caches by
each kernel's source, so two trees' kernels coexist. One process means one CUDA context and one power state:
a round times A, B, B, A, ... with the L2 flushed before each call (``Backend.paired_samples``).

Protocol: one JSON object per line on stdin; each answer is one line on stdout prefixed with
:data:`REPLY` (anything else a kernel prints is ignored by the driver).

* ``{"op": "setup", "trees": {"baseline": DIR, "candidate": DIR}, "cases": [{"key": K, "seed": S}, ...]}``: for
  each tree, build each case's inputs (``spec.make_inputs(case, device, seed)``, the same seed on both sides)
  and kernel call and call it once under ``kernelwatch.kernels.plan.recording`` (compile, autotune, and the
  launches it made); answers ``{"trees": {side: kernels/__init__.py}, "missing": {side: [...]}, "errors":
  {side: {key: message}}, "sizes": {key: [bytes moved, FLOPs]}, "plans": {side: {key: text}},
  "checksums": {side: {key: sum of the first output}}}``. A later setup replaces the earlier one's cases.
* ``{"op": "measure", "key": K, "rep_ms": R, "calls": N, "first": SIDE[, "order": "blocks"]}``:
  ``Backend.paired_samples`` of both sides' calls, SIDE's first (``blocks``: all of SIDE's, then the
  other's); the method is fixed by the case's first measure (graph only where both sides' calls are
  captured; ``wall`` for a case the collector timed by the wall, a stack's eager pass) and forced afterwards;
  answers ``{"baseline_ms": median, "candidate_ms": median,
  "samples": n, "timing": ..., "sm_mhz": [before, after] | null, "power_w": [before, after] | null}``, or
  ``{"error": ..., "full": bool}`` (``full``: the device's memory ran out, its memory freed).
* ``{"op": "quit"}``.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import statistics
import sys
from typing import Any

REPLY = "KWCONFIRM "
SIDES = ("baseline", "candidate")


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _load_backend(path: str):
    """The driver's ``Backend`` module, with the driver's ``kernelwatch.kernels.names`` under it (the timing
    methods it names): a commit's own ``names`` may predate one. The trees' kernels import their own
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


def _first_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:200]}"


def _ours(name: str, extra: tuple[str, ...]) -> bool:
    tops = ("kernelwatch", *(m.split(".")[0] for m in extra))  # a team's package too, not only its kernel module
    return any(name == top or name.startswith(top + ".") for top in tops)


def _describe_steps(plan_module: Any, steps: list[Any]) -> str:
    """``kernel[constexprs warps stages]`` per launch; an autotuned step names the candidate its tuner chose. A
    stack's layers launch the same plan each: ``80 x [...]`` once, not 80 times."""
    out = []
    for step in steps:
        if hasattr(step, "candidates"):
            held = getattr(plan_module, "_CHOSEN", {}).get(id(step))
            chosen = held[1].config() if held else "autotuned"
            out.append(f"{step.name}[{chosen}]")
        else:
            out.append(f"{step.name}[{step.config()}] grid={list(step.grid)}")
    period = next((p for p in range(1, len(out)) if len(out) % p == 0 and out == out[:p] * (len(out) // p)), len(out))
    if period == len(out):
        return "; ".join(out)
    return f"{len(out) // period} x [{'; '.join(out[:period])}]"


def out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says the device's memory is full (PyTorch's OutOfMemoryError, or a kernel's own
    allocator saying so), as opposed to a case that cannot run at all."""
    import torch

    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", ())
    return isinstance(exc, oom) or (isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())


def free_memory(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def load_tree(tree: str, items: list[dict[str, Any]], backend: Any, extra: tuple[str, ...]) -> dict[str, Any]:
    """Import ``tree``'s kernels alone, build and call each case once, and take its modules out of sys.modules.
    A case the device's memory cannot hold beside the ones before it goes to ``full``, its memory freed."""
    import torch

    for name in [n for n in sys.modules if _ours(n, extra)]:
        del sys.modules[name]
    sys.path.insert(0, tree)
    importlib.invalidate_caches()
    out: dict[str, Any] = {
        "calls": {},
        "sizes": {},
        "plans": {},
        "checksums": {},
        "missing": [],
        "errors": {},
        "wall": [],
        "full": [],
    }
    try:
        kernels = importlib.import_module("kernelwatch.kernels")
        spec_module = importlib.import_module("kernelwatch.kernels.spec")
        try:
            plan_module = importlib.import_module("kernelwatch.kernels.plan")
        except ImportError:  # a tree older than launch plans
            plan_module = None
        out["tree"] = os.path.abspath(kernels.__file__)
        own = os.path.isdir(os.path.join(tree, "kernelwatch", "kernels"))
        # A tree that holds this package lists its own kernels; a commit older than the registry would add
        # KernelWatch's own entry points (the project's kernels when it watches itself) a second time and refuse.
        specs = kernels.discover(tuple(m for m in extra if not (own and _ours(m, ()))))
        if extra and not os.path.isdir(os.path.join(tree, "kernelwatch")):  # a team's tree: its kernel is what it holds
            out["tree"] = os.path.abspath(sys.modules[extra[0]].__file__)
        by_key = {c.key: (spec, c) for spec in specs.values() for c in spec.perf_cases()}
        for item in items:
            inputs = fn = result = first = None  # the case before's, freed before this one is built
            if item["key"] not in by_key:
                out["missing"].append(item["key"])
                continue
            spec, case = by_key[item["key"]]
            stack_of = getattr(spec_module, "stack_of", None)  # a tree older than the stack cases has none
            stack = stack_of(case, backend.device) if stack_of is not None else None
            if stack is not None and stack.mode == "eager":  # the collector timed it by the wall: so is it here
                out["wall"].append(item["key"])
            try:
                inputs = spec.make_inputs(case, backend.device, item["seed"])
                fn = spec.implementations(case, inputs)[spec_module.KERNEL_IMPL]
                if plan_module is not None and hasattr(plan_module, "recording"):
                    with plan_module.recording() as rec:
                        result = fn()
                    out["plans"][item["key"]] = _describe_steps(plan_module, rec.steps)
                else:
                    result = fn()
                backend.synchronize()
                first = result[0] if isinstance(result, (tuple, list)) else result
                if isinstance(first, torch.Tensor):
                    out["checksums"][item["key"]] = float(first.detach().double().sum())
                out["calls"][item["key"]] = fn
                out["sizes"][item["key"]] = [spec.bytes_moved(case), spec.flops(case)]
            except Exception as exc:
                if out_of_memory(exc):
                    out["full"].append(item["key"])
                else:
                    out["errors"][item["key"]] = _first_line(exc)
            if item["key"] in out["full"]:  # freed past the except clause: its traceback holds the case's tensors
                inputs = fn = result = first = None
                free_memory(str(backend.device))
    finally:
        sys.path.remove(tree)
        for name in [n for n in sys.modules if _ours(n, extra)]:
            del sys.modules[name]
    return out


class Power:
    """NVML's SM clock and board power of the device (``pynvml`` from nvidia-ml-py), None where it is missing."""

    def __init__(self, device: str) -> None:
        self.handle = None
        self.nvml = None
        if not device.startswith("cuda"):
            return
        try:
            import pynvml
            import torch

            pynvml.nvmlInit()
            uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
            self.handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
            self.nvml = pynvml
        except Exception:
            self.handle = None

    def read(self) -> tuple[float, float] | None:
        if self.handle is None:
            return None
        try:
            mhz = float(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
            watts = self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
        except Exception:
            return None
        return mhz, watts


def main(argv: list[str]) -> int:
    backends_path, device, *extra_list = argv
    extra = tuple(extra_list)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") not in (here, os.getcwd())]  # no tree here
    backends = _load_backend(backends_path)
    import torch

    backend = backends.Backend(torch.device(device), time_on_cpu=device.startswith("cpu"))
    backend.activate()
    power = Power(device)
    loaded: dict[str, dict[str, Any]] = {}
    methods: dict[str, str] = {}
    for line in sys.stdin:
        msg = json.loads(line)
        if msg["op"] == "quit":
            break
        if msg["op"] == "setup":  # a later setup replaces the cases of the one before (their memory is freed)
            loaded.clear()
            methods.clear()
            gc.collect()
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
            loaded = {side: load_tree(msg["trees"][side], msg["cases"], backend, extra) for side in SIDES}
            full = sorted({k for side in SIDES for k in loaded[side]["full"]})
            if full:  # neither side keeps a case the other could not build: the driver sets it up again
                for side in SIDES:
                    for part in ("calls", "plans", "checksums", "errors"):
                        for key in full:
                            loaded[side][part].pop(key, None)
                free_memory(device)
            for side in SIDES:
                methods.update(dict.fromkeys(loaded[side]["wall"], "wall"))
            sizes: dict[str, list[int]] = {}
            for side in reversed(SIDES):  # the baseline's where both have the case
                sizes.update(loaded[side]["sizes"])
            _reply(
                {
                    "trees": {s: loaded[s].get("tree", "") for s in SIDES},
                    "missing": {s: loaded[s]["missing"] for s in SIDES},
                    "errors": {s: loaded[s]["errors"] for s in SIDES},
                    "sizes": sizes,
                    "plans": {s: loaded[s]["plans"] for s in SIDES},
                    "checksums": {s: loaded[s]["checksums"] for s in SIDES},
                    "full": full,
                }
            )
        elif msg["op"] == "measure":
            key = msg["key"]
            first = msg.get("first", "baseline")
            sides = SIDES if first == "baseline" else tuple(reversed(SIDES))
            try:
                fns = [loaded[s]["calls"][key] for s in sides]
                before = power.read()
                samples, timing = backend.paired_samples(
                    fns,
                    rep_ms=msg["rep_ms"],
                    method=methods.get(key, "auto"),
                    calls=msg.get("calls", 1),
                    blocks=msg.get("order") == "blocks",
                )
                after = power.read()
            except Exception as exc:  # a forced graph whose capture failed this time, or the memory full
                full = out_of_memory(exc)
                message = _first_line(exc)
                exc = None
                if full:  # a capture's pool or a pass's outputs beside every case's inputs: the driver sets it up again
                    free_memory(device)
                _reply({"error": message, "full": full})
                continue
            methods.setdefault(key, timing if timing in ("events", "wall") else "graph")
            got = dict(zip(sides, samples))
            reading = None if before is None or after is None else (before, after)
            _reply(
                {
                    "baseline_ms": statistics.median(got["baseline"]),
                    "candidate_ms": statistics.median(got["candidate"]),
                    "samples": len(got["baseline"]),
                    "timing": timing,
                    "sm_mhz": None if reading is None else [reading[0][0], reading[1][0]],
                    "power_w": None if reading is None else [reading[0][1], reading[1][1]],
                }
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
