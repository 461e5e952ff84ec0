"""Compile every kernel launch of a run before its suites, on the host's spare cores, into the run's Triton cache.

On a fresh H200 host, compilation was the largest share of a full run ("perf: compile + warm-up"
150.9 s of 480 s) and happened one launch at a time inside the device worker while 15 of the 16 cores
waited. Here every launch the selected cases will make is compiled first, in a pool of processes, so a
worker's first launch of each configuration finds it in Triton's cache.

Which launches: each case is run *dry* in a pool process. Its inputs are fake tensors (``FakeTensorMode``:
shapes, dtypes and strides, no memory), its launcher plans for the device description the run's workers
report (:class:`kernelwatch.kernels.plan.DeviceInfo`), and :func:`kernelwatch.kernels.plan.recording` with ``dry=True``
keeps each launch and its arguments instead of starting it. Each launch is then specialised as Triton's JIT specialises
it at the call (its own binder: argument types, 16-byte alignment of pointers, integers equal to 1 or
divisible by 16; the same options and cache-invalidating environment), so the cache key computed here is
the one the worker's launch computes. Distinct keys are compiled with ``triton.compile`` for the device's
``GPUTarget``, as ``kernelwatch.collect.compile_check`` compiles offline. A case whose launcher cannot run on fake
tensors (it reads a value back, or asks the driver for something) is counted as not predicted; its
launches compile in the worker, as before.

Only CUDA devices are precompiled: the CPU interpreter compiles nothing (the phase is skipped, with no
trace in the run), and triton-ascend's JIT is not the one mirrored here.

The cache (:func:`cache_dirs`) is kept between runs; the run's notes say how warm it was
(:meth:`Outcome.note`) and ``run.phases_s`` holds the phase's wall seconds (``precompile``) and the
compile seconds summed over the pool (``precompile.compile``: 0 when every launch was cached).

When nothing changed, nothing is dry-run. A precompile with no failure leaves a list in the cache
(:class:`Manifest`, in ``<triton cache>/kernelwatch-precompiled/``) named by a digest of everything its
launches depend on: the cases, the device description, the source of every kernel module (and of the
extra modules), the Triton and torch versions, Triton's cache-invalidating environment and the knobs
copied into a launch's options. The next run with the same digest checks that each listed compilation is
still in Triton's cache (its group file, through Triton's own cache manager) and is done: on an H200 a
warm precompile of the full suite spent 16.5 s starting 15 processes and dry-running 482 cases to find
every launch cached. A missing entry, or any change of the digest, runs the whole phase; a list that is
wrong can only cost a compile in the worker, never a wrong kernel (the worker's launch computes its own key).
"""

from __future__ import annotations

import concurrent.futures as cf
import functools
import hashlib
import json
import multiprocessing as mp
import os
import time
import warnings
from collections.abc import Iterable, Mapping, MutableMapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

WorkItem = tuple[str, str]  # (suite, case key), as kernelwatch.collect.worker has it
DEFAULT_ROOT = Path.home() / ".cache" / "kernelwatch"
MAX_ERRORS = 3  # first failures named in the run's notes


# ---------------------------------------------------------------------------------------------
# Where the compiled kernels are kept between runs
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CacheDirs:
    """Triton's cache folder, TorchInductor's (None: torch's own default) and which setting chose them."""

    triton: Path
    inductor: Path | None
    source: str


def cache_dirs(env: Mapping[str, str] | None = None) -> CacheDirs:
    """The run's compiler caches. Precedence:

    1. ``KERNELWATCH_CACHE_DIR=ROOT``: Triton's cache in ``ROOT/triton``, TorchInductor's (the torch.compile
       baseline) in ``ROOT/inductor``, whatever ``TRITON_CACHE_DIR`` says;
    2. ``TRITON_CACHE_DIR``: Triton's cache there, TorchInductor's where torch puts it;
    3. neither: ``~/.cache/kernelwatch/triton`` and ``~/.cache/kernelwatch/inductor``.

    A ``TORCHINDUCTOR_CACHE_DIR`` of the user's own always wins for TorchInductor.
    """
    env = os.environ if env is None else env
    inductor_env = env.get("TORCHINDUCTOR_CACHE_DIR") or None
    if env.get("KERNELWATCH_CACHE_DIR"):
        root = Path(env["KERNELWATCH_CACHE_DIR"]).expanduser()
        return CacheDirs(
            root / "triton", Path(inductor_env) if inductor_env else root / "inductor", "KERNELWATCH_CACHE_DIR"
        )
    if env.get("TRITON_CACHE_DIR"):
        return CacheDirs(
            Path(env["TRITON_CACHE_DIR"]).expanduser(), Path(inductor_env) if inductor_env else None, "TRITON_CACHE_DIR"
        )
    return CacheDirs(
        DEFAULT_ROOT / "triton", Path(inductor_env) if inductor_env else DEFAULT_ROOT / "inductor", "default"
    )


def use_cache_dirs(env: MutableMapping[str, str] | None = None) -> CacheDirs:
    """Point this process and the workers it starts afterwards at :func:`cache_dirs` (created if needed); with
    ``env``, a child's environment instead of this process's."""
    env = os.environ if env is None else env
    dirs = cache_dirs(env)
    dirs.triton.mkdir(parents=True, exist_ok=True)
    env["TRITON_CACHE_DIR"] = str(dirs.triton)
    if dirs.inductor is not None:
        dirs.inductor.mkdir(parents=True, exist_ok=True)
        env["TORCHINDUCTOR_CACHE_DIR"] = str(dirs.inductor)
    return dirs


# ---------------------------------------------------------------------------------------------
# The outcome, as the run records it
# ---------------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """``launches``: distinct compilations the cases need; each was found ``cached``, ``compiled`` or
    ``failed``; ``unpredicted``: cases whose launches could not be worked out ahead (compiled in the
    worker), the first of them with why in ``reasons``; ``compile_s``: seconds of compilation summed over
    the pool; ``wall_s``: the phase's wall time."""

    target: str
    processes: int
    cases: int = 0
    launches: int = 0
    cached: int = 0
    compiled: int = 0
    failed: int = 0
    unpredicted: int = 0
    compile_s: float = 0.0
    wall_s: float = 0.0
    errors: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    listed: bool = False  # found complete from the list of the last precompile (:class:`Manifest`): no dry run

    @property
    def state(self) -> str:
        """``warm`` (every launch was cached), ``cold`` (none was) or ``partly warm``."""
        if self.launches and self.cached == self.launches:
            return "warm"
        return "partly warm" if self.cached else "cold"

    def note(self, cache: Path | None = None) -> str:
        where = f" in {cache}" if cache is not None else ""
        text = (
            f"Triton cache {self.state}{where}: {self.cached} of {self.launches} launches for {self.target} "
            f"cached, {self.compiled} compiled ahead ({self.compile_s:.1f} s over {self.processes} processes, "
            f"{self.wall_s:.1f} s wall), {self.failed} failed, {self.unpredicted} of {self.cases} cases "
            "not predicted (compiled in the worker)"
        )
        if self.listed:
            text += ", every launch checked against the list of the last precompile of these kernels (no dry run)"
        if self.errors:
            text += ", first failures: " + " | ".join(self.errors)
        if self.reasons:
            text += ", first cases not predicted: " + " | ".join(self.reasons)
        return text.replace(";", ",")  # the run's notes are joined with "; "


def target_of(info: Any) -> tuple[str, int, int] | None:
    """(backend, arch, warp size) of ``GPUTarget`` for a :class:`~kernelwatch.kernels.plan.DeviceInfo`; None where this
    module does not precompile (the interpreter, Ascend, a CUDA device without a capability)."""
    if info.vendor != "nvidia" or info.interpreter or not info.capability:
        return None
    return ("cuda", int(info.capability), 32)


def spare_processes(workers: int, cpus: int) -> int:
    """The host's cores less one per device worker, at least one."""
    return max(1, cpus - workers)


def precompile(items: Iterable[WorkItem], info: Any, processes: int, extra_modules: tuple[str, ...] = ()) -> Outcome:
    """Compile every launch of ``items`` for the device ``info`` describes, in ``processes`` spawned
    processes, into ``$TRITON_CACHE_DIR`` (set it first: :func:`use_cache_dirs`). Raises ValueError for a
    device this module does not precompile (see :func:`target_of`)."""
    target = target_of(info)
    if target is None:
        raise ValueError(f"nothing to precompile for {info.name or info.vendor} (only CUDA devices are)")
    start = time.perf_counter()
    cases = list(dict.fromkeys(("accuracy" if s == "explore" else s, k) for s, k in items if s != "profile"))
    outcome = Outcome(f"{info.name or 'cuda'} (sm_{target[1]})", processes, cases=len(cases))
    if not cases:
        return outcome
    fields = {k: v for k, v in asdict(info).items() if not k.startswith("_")}
    manifest = Manifest.of(cases, fields, extra_modules)
    if manifest.complete(outcome):
        outcome.wall_s = time.perf_counter() - start
        return outcome
    ctx = mp.get_context("spawn")
    with cf.ProcessPoolExecutor(
        max_workers=processes, mp_context=ctx, initializer=_init, initargs=(fields, tuple(extra_modules), target)
    ) as pool:
        chunk = max(1, len(cases) // (processes * 4))
        launches: dict[str, tuple] = {}
        for found in pool.map(_dry_run, cases, chunksize=chunk):
            if isinstance(found, str):
                outcome.unpredicted += 1
                if len(outcome.reasons) < MAX_ERRORS:
                    outcome.reasons.append(found)
                continue
            for key, launch in found:
                launches.setdefault(key, launch)
        outcome.launches = len(launches)
        for hit, seconds, error in pool.map(_compile, list(launches.values())):
            if error:
                outcome.failed += 1
                if len(outcome.errors) < MAX_ERRORS:
                    outcome.errors.append(error)
            elif hit:
                outcome.cached += 1
            else:
                outcome.compiled += 1
            outcome.compile_s += 0.0 if hit else seconds
    if not outcome.failed:
        manifest.write(outcome, {key: launch[1] for key, launch in launches.items()})
    outcome.wall_s = time.perf_counter() - start
    return outcome


# ---------------------------------------------------------------------------------------------
# What the last precompile of the same kernels found
# ---------------------------------------------------------------------------------------------
MANIFEST_DIR = "kernelwatch-precompiled"


@dataclass(frozen=True)
class Manifest:
    """The list a precompile leaves in Triton's cache: its launches' cache keys (with the kernel's name, which
    names the compilation's group file), the number of cases and those not predicted, under a digest of
    everything the launches depend on (see the module docstring)."""

    path: Path

    @classmethod
    def of(cls, cases: list[WorkItem], device: Mapping[str, Any], extra_modules: tuple[str, ...]) -> Manifest:
        import torch
        import triton
        from triton._C.libtriton import get_cache_invalidating_env_vars

        digest = hashlib.sha256()
        digest.update(json.dumps([triton.__version__, torch.__version__]).encode())
        digest.update(json.dumps(sorted(map(list, cases))).encode())
        digest.update(json.dumps(dict(device), sort_keys=True, default=str).encode())
        digest.update(json.dumps(sorted(get_cache_invalidating_env_vars().items())).encode())
        digest.update(json.dumps(run_knobs()).encode())
        for path in source_files(("kernelwatch.kernels", *extra_modules)):
            digest.update(str(path).encode() + b"\0" + path.read_bytes() + b"\0")
        return cls(Path(_triton_cache_dir()) / MANIFEST_DIR / f"{digest.hexdigest()}.json")

    def complete(self, outcome: Outcome) -> bool:
        """True, with ``outcome`` filled in, when the list exists and every compilation on it is in the cache."""
        from triton.runtime.cache import get_cache_manager

        try:
            listed = json.loads(self.path.read_text())
            launches: dict[str, str] = listed["launches"]
            for key, name in launches.items():
                metadata = f"{name[:150]}.json"  # what triton.compile looks up first (triton/compiler/compiler.py)
                if not (get_cache_manager(key).get_group(metadata) or {}).get(metadata):
                    return False
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False
        outcome.launches = outcome.cached = len(launches)
        outcome.unpredicted = int(listed.get("unpredicted", 0))
        outcome.reasons = [str(r) for r in listed.get("reasons", [])][:MAX_ERRORS]
        outcome.processes = 0
        outcome.listed = True
        return True

    def write(self, outcome: Outcome, launches: Mapping[str, str]) -> None:
        """Keep the list (written whole, then renamed: a reader never sees half of it); a cache folder that
        cannot be written only costs the next run its dry runs."""
        body = {"launches": dict(launches), "unpredicted": outcome.unpredicted, "reasons": outcome.reasons}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}")
            tmp.write_text(json.dumps(body, sort_keys=True))
            os.replace(tmp, self.path)
        except OSError:
            pass


def _triton_cache_dir() -> str:
    from triton import knobs

    return knobs.cache.dir


def source_files(modules: Iterable[str]) -> list[Path]:
    """Every ``.py`` file of ``modules`` (a package: all its files, recursively), sorted; a module that
    cannot be found adds nothing (its cases then fail in the dry run, as they would in the worker)."""
    import importlib.util

    found: set[Path] = set()
    for name in modules:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is None or spec.origin is None:
            continue
        origin = Path(spec.origin)
        if spec.submodule_search_locations:
            for root in spec.submodule_search_locations:
                found.update(Path(root).rglob("*.py"))
        elif origin.suffix == ".py":
            found.add(origin)
    return sorted(found)


# ---------------------------------------------------------------------------------------------
# In a pool process
# ---------------------------------------------------------------------------------------------
_STATE: dict[str, Any] = {}


class _Pointer:
    """What Triton's specialisation reads of a tensor argument: its dtype and address (16-byte alignment).

    Fake tensors have no address; a real one is its allocation (aligned: the caching allocator hands out
    512-byte blocks) plus the view's storage offset."""

    def __init__(self, tensor: Any) -> None:
        self.dtype = tensor.dtype
        self._ptr = 512 + tensor.storage_offset() * tensor.element_size()

    def data_ptr(self) -> int:
        return self._ptr


def _init(info_fields: dict[str, Any], extra_modules: tuple[str, ...], target: tuple[str, int, int]) -> None:
    os.environ.pop("TRITON_INTERPRET", None)  # compile the kernels, never interpret them
    # No device here, ever: a launcher that starts a kernel other than through kernelwatch.kernels.plan.launch fails
    # (its case is not predicted) instead of launching on fake tensors, and no process takes a CUDA context.
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    warnings.filterwarnings("ignore")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    from kernelwatch.kernels import discover
    from kernelwatch.kernels.plan import DeviceInfo

    index: dict[WorkItem, Any] = {}
    for spec in discover(extra_modules).values():
        for case in spec.accuracy_cases():
            index[("accuracy", case.key)] = (spec, case)
        for case in spec.perf_cases():
            index[("perf", case.key)] = (spec, case)
    gpu = GPUTarget(*target)
    _STATE.update(
        index=index,
        info=DeviceInfo(**{**info_fields, "interpreter": False}),
        target=gpu,
        backend=make_backend(gpu),
        mode=FakeTensorMode(allow_non_fake_inputs=True),
        binders={},
        hit=[],
    )
    knobs.compilation.listener = _listen


def _listen(*, cache_hit: bool, **_: Any) -> None:
    _STATE["hit"].append(cache_hit)


def _dry_run(item: WorkItem) -> list[tuple[str, tuple]] | str:
    """The (cache key, launch) of every launch case ``item`` makes, or why they could not be worked out."""
    import torch

    from kernelwatch.kernels import device as kernel_device
    from kernelwatch.kernels.names import KERNEL_IMPL
    from kernelwatch.kernels.plan import recording

    spec, case = _STATE["index"][item]
    token = kernel_device._simulated.set(_STATE["info"])  # plans for the run's device, on fake CPU tensors
    try:
        with _STATE["mode"], recording(dry=True) as recorder:
            inputs = spec.make_inputs(case, torch.device("cpu"), 0)
            if item[0] == "perf":
                spec.implementations(case, inputs)[KERNEL_IMPL]()
            else:
                spec.run(case, inputs)
        return [_specialise(step, args) for step, args in recorder.calls]
    except Exception as exc:
        return f"{item[1]}: {type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
    finally:
        kernel_device._simulated.reset(token)


@functools.cache
def run_knobs() -> tuple[tuple[str, str], ...]:
    """The (option, ``knobs.compilation`` attribute) pairs the installed Triton's ``JITFunction.run`` copies into
    a launch's options before its cache key is computed, read from its source: they differ between versions
    (3.9 added ``fpsan_homomorphic_casts``; 3.6 has only ``instrumentation_mode``), and writing one list by
    hand made every case of a Triton 3.6 host fail its dry run."""
    import inspect
    import re

    from triton.runtime.jit import JITFunction

    source = inspect.getsource(JITFunction.run)
    return tuple(re.findall(r'kwargs\["(\w+)"\]\s*=\s*knobs\.compilation\.(\w+)', source))


def _specialise(step: Any, args: tuple) -> tuple[str, tuple]:
    """What ``JITFunction.run`` computes before compiling (triton/runtime/jit.py), for these arguments."""
    import torch
    from triton import knobs
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler.compiler import ASTSource, get_cache_key
    from triton.runtime.jit import create_function_from_signature

    fn, backend = step.fn, _STATE["backend"]
    binder = _STATE["binders"].get(fn)
    if binder is None:
        binder = _STATE["binders"][fn] = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = dict(step._kwargs)
    kwargs["debug"] = kwargs.get("debug", fn.debug) or knobs.runtime.debug
    for option, knob in run_knobs():
        kwargs[option] = getattr(knobs.compilation, knob)
    shown = [_Pointer(a) if isinstance(a, torch.Tensor) else a for a in args]
    bound, specialization, options = binder(*shown, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    src = ASTSource(fn, signature, constexprs, attrs)
    key = get_cache_key(src, backend, options, get_cache_invalidating_env_vars())
    python_fn = fn.fn
    return (
        hashlib.sha256(key.encode()).hexdigest(),
        (python_fn.__module__, python_fn.__name__, signature, constexprs, attrs, kwargs),
    )


def _jit_function(module: str, name: str) -> Any:
    import importlib

    from triton.runtime.jit import JITFunction

    obj = getattr(importlib.import_module(module), name)
    while not isinstance(obj, JITFunction):  # an autotuner or heuristics wrapper holds the function
        obj = obj.fn
    return obj


def _compile(launch: tuple) -> tuple[bool, float, str]:
    """(found in the cache, seconds, first error line or "") for one launch from :func:`_specialise`."""
    import triton
    from triton.compiler.compiler import ASTSource

    module, name, signature, constexprs, attrs, kwargs = launch
    start = time.perf_counter()
    _STATE["hit"].clear()
    try:
        options = _STATE["backend"].parse_options(kwargs)
        triton.compile(
            ASTSource(_jit_function(module, name), signature, constexprs, attrs),
            target=_STATE["target"],
            options=options.__dict__,
        )
    except Exception as exc:
        text = str(exc).strip().splitlines()
        return False, time.perf_counter() - start, f"{name}: {type(exc).__name__}: {text[0][:200] if text else ''}"
    return bool(_STATE["hit"] and _STATE["hit"][-1]), time.perf_counter() - start, ""
