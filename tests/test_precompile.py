"""Compiling a run's launches ahead of its suites (kernelwatch.collect.precompile), on the CPU: real Triton compiling
for sm_90 offline into a temporary cache, as `make compile-check` does; no GPU. A few small launches only."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from kernelwatch.collect.precompile import (
    MANIFEST_DIR,
    CacheDirs,
    Manifest,
    cache_dirs,
    precompile,
    spare_processes,
    target_of,
)
from kernelwatch.kernels.plan import ASCEND_910B, NVIDIA_H200, DeviceInfo

MSE = "mse_loss/persistent/fp32/direction=fwd,reduction="


def test_cache_dirs_precedence_kernelwatch_then_triton_then_the_default() -> None:
    home = Path.home() / ".cache" / "kernelwatch"
    assert cache_dirs({}) == CacheDirs(home / "triton", home / "inductor", "default")
    assert cache_dirs({"TRITON_CACHE_DIR": "/t"}) == CacheDirs(Path("/t"), None, "TRITON_CACHE_DIR")
    both = {"TRITON_CACHE_DIR": "/t", "KERNELWATCH_CACHE_DIR": "/k"}
    assert cache_dirs(both) == CacheDirs(Path("/k/triton"), Path("/k/inductor"), "KERNELWATCH_CACHE_DIR")
    assert cache_dirs({**both, "TORCHINDUCTOR_CACHE_DIR": "/i"}).inductor == Path("/i")  # the user's own wins
    assert cache_dirs({"KERNELWATCH_CACHE_DIR": ""}).source == "default"  # empty is unset


def test_only_cuda_devices_are_precompiled_and_the_pool_leaves_a_core_per_worker() -> None:
    assert target_of(NVIDIA_H200) == ("cuda", 90, 32)
    interpreter = DeviceInfo("cpu", 2, name="triton-interpreter", interpreter=True)
    assert target_of(ASCEND_910B) is None and target_of(interpreter) is None
    with pytest.raises(ValueError, match="only CUDA devices"):
        precompile([("accuracy", "x")], interpreter, 1)
    assert spare_processes(1, 16) == 15 and spare_processes(8, 8) == 1 and spare_processes(4, 2) == 1


def _mse_items() -> list[tuple[str, str]]:
    from kernelwatch.kernels import discover

    spec = discover()["mse_loss"]
    perf = [c.key for c in spec.perf_cases() if c.key.startswith(MSE + "mean,shape=")][:2]
    accuracy = [c.key for c in spec.accuracy_cases() if c.key.startswith(MSE + "none,shape=")][:2]
    assert len(perf) == 2 and len(accuracy) == 2
    return [("perf", k) for k in perf] + [("accuracy", k) for k in accuracy] + [("explore", accuracy[0])]


def test_parallel_precompile_fills_the_cache_and_a_second_run_finds_every_launch(tmp_path: Path, monkeypatch) -> None:
    """Cold: every distinct launch compiled for sm_90 by two processes; warm (same folder): all found,
    nothing compiled. A cache key that depended on anything but the launch (the process, the order) would
    miss the second time."""
    cache = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    items = _mse_items()
    cold = precompile(items, NVIDIA_H200, 2)
    assert cold.cases == 4  # the exploration of an accuracy case makes that case's launches: counted once
    assert cold.unpredicted == 0 and cold.failed == 0, cold
    assert cold.launches >= 2 and cold.compiled == cold.launches and cold.cached == 0, cold
    assert cold.compile_s > 0 and cold.state == "cold"
    assert any(p.suffix == ".cubin" for p in cache.rglob("*")), "sm_90 cubins in the run's cache"
    shutil.rmtree(cache / MANIFEST_DIR)  # the launches worked out again, not read from the list
    warm = precompile(items, NVIDIA_H200, 2)
    assert not warm.listed and warm.processes == 2, warm
    assert (warm.launches, warm.cached, warm.compiled, warm.failed) == (cold.launches, cold.launches, 0, 0), warm
    assert warm.compile_s == 0 and warm.state == "warm"
    note = warm.note(cache)
    assert (
        note.startswith(
            f"Triton cache warm in {cache}: {cold.launches} of {cold.launches} launches for NVIDIA H200 (sm_90) cached"
        )
        and ";" not in note
    )


def test_a_case_that_cannot_run_dry_is_left_to_its_worker(tmp_path: Path, monkeypatch) -> None:
    """The planted kernel that raises, and one that starts its kernel itself (not through
    kernelwatch.kernels.plan.launch): neither launch can be worked out ahead, so both cases are counted as not predicted
    and nothing compiles (the pool sees no device: the direct launch fails instead of running on fake tensors)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    monkeypatch.setenv("PLANTED_VARIANTS", "correct,raises")
    items = [("accuracy", f"planted/{v}/fp32/shape=1000") for v in ("correct", "raises")]
    outcome = precompile(items, NVIDIA_H200, 1, ("tests.planted_kernels",))
    assert (outcome.cases, outcome.unpredicted, outcome.launches) == (2, 2, 0), outcome
    assert sorted(r.split(": ")[0] for r in outcome.reasons) == sorted(k for _, k in items), outcome.reasons
    assert "first cases not predicted: planted/" in outcome.note()  # why, in the run's notes
    assert os.environ.get("CUDA_VISIBLE_DEVICES") != "", "the pool's settings stay in the pool"


def test_the_options_copied_from_knobs_are_those_of_the_installed_triton() -> None:
    """A hand-written list (3.9's ``fpsan_homomorphic_casts``) made every dry run fail on a Triton 3.6 host:
    0 of 482 cases predicted. The list is read from the installed ``JITFunction.run``: every attribute exists,
    ``instrumentation_mode`` (3.2 and later) is among them."""
    from triton import knobs

    from kernelwatch.collect.precompile import run_knobs

    pairs = run_knobs()
    assert ("instrumentation_mode", "instrumentation_mode") in pairs
    assert all(hasattr(knobs.compilation, knob) for _, knob in pairs), pairs


def test_an_unchanged_run_is_checked_against_the_last_list_and_an_evicted_launch_is_compiled_again(
    tmp_path: Path, monkeypatch
) -> None:
    """The second precompile of the same cases and kernels starts no process and dry-runs nothing: it finds
    the list the first one left and every compilation on it in the cache. One compilation taken out of the
    cache, the list no longer holds: the whole phase runs and compiles exactly that one again."""
    cache = tmp_path / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    items = _mse_items()
    cold = precompile(items, NVIDIA_H200, 2)
    assert cold.failed == 0 and not cold.listed and len(list((cache / MANIFEST_DIR).glob("*.json"))) == 1
    warm = precompile(items, NVIDIA_H200, 2)
    assert warm.listed and warm.processes == 0, warm
    assert (warm.cases, warm.launches, warm.cached, warm.compiled) == (cold.cases, cold.launches, cold.launches, 0)
    assert warm.wall_s < cold.wall_s / 5, (warm.wall_s, cold.wall_s)
    assert "checked against the list of the last precompile" in warm.note(cache) and ";" not in warm.note()
    groups = sorted(p.parent for p in cache.rglob("__grp__*.json") if MANIFEST_DIR not in p.parts)
    assert len(groups) == cold.launches
    shutil.rmtree(groups[0])
    again = precompile(items, NVIDIA_H200, 2)
    assert not again.listed and (again.launches, again.cached, again.compiled) == (cold.launches, cold.launches - 1, 1)
    assert precompile(items, NVIDIA_H200, 2).listed
    fewer = precompile(items[:1], NVIDIA_H200, 1)  # other cases: another list
    assert not fewer.listed and fewer.cached == fewer.launches


def test_the_list_is_named_by_the_kernels_source_the_cases_and_the_device(tmp_path: Path, monkeypatch) -> None:
    """An edit of any kernel module (here an extra module's file), another case list or another device
    description names another list, so a changed kernel is never taken for a compiled one."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    package = tmp_path / "src" / "kw_manifest_probe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    cases = [("perf", "mse_loss/x")]
    fields = {"vendor": "nvidia", "compute_units": 132}
    first = Manifest.of(cases, fields, ("kw_manifest_probe",))
    assert first == Manifest.of(cases, fields, ("kw_manifest_probe",))
    assert first.path.parent == tmp_path / "triton" / MANIFEST_DIR
    (package / "__init__.py").write_text("X = 2\n")
    assert Manifest.of(cases, fields, ("kw_manifest_probe",)) != first
    assert Manifest.of(cases + [("accuracy", "mse_loss/y")], fields, ()) != Manifest.of(cases, fields, ())
    assert Manifest.of(cases, {**fields, "compute_units": 114}, ()) != Manifest.of(cases, fields, ())
    assert "kw_manifest_probe" not in sys.modules, "the digest reads files; it imports no module"
