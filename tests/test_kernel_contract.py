"""The kernel contract: a kernel is its module. A kernel planted in a temporary folder (found by the one
discovery function, ``kernels.discover``, through the project file ``--project`` names) goes through
collect, the launch-plan checks, the compile check's listing, the dashboard's data layer and ``synth`` with
no other edit: everything they know about it comes from its ``KernelSpec``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULE = "planted_contract_kernel"
NAME = "planted_scaled_sum"
PLANTED = textwrap.dedent('''
    """y = sum(x) * scale, a planted kernel: its spec is all that says it exists."""
    import torch
    import triton
    import triton.language as tl

    from kernelwatch.kernels.device import describe
    from kernelwatch.kernels.names import COPY_CEILING, EAGER_IMPL, KERNEL_IMPL, READ_CEILING
    from kernelwatch.kernels.plan import Footprint, Launch, launch, load, pointer, work
    from kernelwatch.kernels.spec import Case, KernelSpec, Tolerance

    VARIANTS = ("one_pass", "rows")


    @triton.jit
    def _planted_sum_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
        tl.atomic_add(out_ptr, tl.sum(acc, axis=0) * scale)


    def plan(n, dtype, device):
        programs = 2 if device.vendor == "cpu" else device.compute_units
        sig = {"x_ptr": pointer(dtype), "out_ptr": "*fp32", "n": "i32", "scale": "fp32"}
        footprint = Footprint(((load("x", (256,), dtype), work("acc", (256,))),))
        return (Launch(_planted_sum_kernel, (programs,), {"BLOCK": 256}, sig, footprint=footprint),)


    def planted_scaled_sum(x, scale=1.0):
        """sum(x) * scale in fp32 through one persistent Triton launch (a planted kernel for the contract test)."""
        out = torch.zeros((), dtype=torch.float32, device=x.device)
        (step,) = plan(x.numel(), {torch.float32: "fp32", torch.float16: "fp16"}[x.dtype], describe(x.device))
        launch(step, x.reshape(-1), out, x.numel(), float(scale))
        return out


    def _cases(trials):
        return [Case.make("planted_scaled_sum", v, dtype, Tolerance(1e-3, 1e-3), trials=trials, shape=(n,),
                          direction="fwd") for v in VARIANTS for dtype in ("fp32", "fp16") for n in (300, 1000)]


    def _inputs(case, device, seed):
        gen = torch.Generator().manual_seed(seed)
        return {"x": torch.rand(case.p["shape"], generator=gen).to(case.torch_dtype).to(device)}


    SPEC = KernelSpec(
        name="planted_scaled_sum",
        accuracy_cases=lambda: _cases(2),
        perf_cases=lambda: _cases(1)[:1],
        make_inputs=_inputs,
        run=lambda case, i: (planted_scaled_sum(i["x"], 0.5),),
        reference=lambda case, i: (i["x"].double().sum() * 0.5,),
        implementations=lambda case, i: {KERNEL_IMPL: lambda: planted_scaled_sum(i["x"], 0.5),
                                         EAGER_IMPL: lambda: i["x"].float().sum() * 0.5},
        bytes_moved=lambda case: case.p["shape"][0] * 4 + 4,
        launch_plans=lambda case, device: plan(case.p["shape"][0], case.dtype, device),
        variants=VARIANTS,
        ceiling=lambda case: READ_CEILING if case.variant == "one_pass" else COPY_CEILING,
        plan_sample=2,
        public=("planted_scaled_sum",),
    )
''')


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("planted")
    (folder / f"{MODULE}.py").write_text(PLANTED)
    # the kernels of a project of their own, its commit this checkout's
    (folder / "kernelwatch.toml").write_text(f'kernels = ["{MODULE}"]\nrepository = "{ROOT}"\npython-path = "."\n')
    sys.path.insert(0, str(folder))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)]), "TRITON_INTERPRET": "1"}
    yield {"folder": folder, "env": env}
    sys.path.remove(str(folder))
    sys.modules.pop(MODULE, None)


def _kernelwatch(env: dict, *args: str) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [sys.executable, "-m", "kernelwatch", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-2000:])
    return out


def test_discovery_takes_the_planted_module_and_nothing_else_names_it(planted) -> None:
    from kernelwatch import kernels

    specs = kernels.discover((MODULE,))
    assert NAME in specs and specs[NAME].variants == ("one_pass", "rows")
    assert NAME not in kernels.discover()
    sources = [p for p in ROOT.rglob("*.py") if ".venv" not in p.parts and p.name != Path(__file__).name]
    assert not [p for p in sources if NAME in p.read_text(errors="replace")]


@pytest.mark.slow
def test_collect_on_the_cpu_then_the_dashboard_data_layer_take_it(planted, tmp_path) -> None:
    from kernelwatch import kernels
    from kernelwatch.collect.ceilings import fill_missing
    from kernelwatch.dashboard import data
    from kernelwatch.store import queries
    from kernelwatch.store.engine import open_database
    from kernelwatch.store.ingest import ingest_documents, load_files

    artifact = tmp_path / "run.json"
    _kernelwatch(
        planted["env"],
        "collect",
        "--device",
        "cpu",
        "--suite",
        "accuracy,perf",
        "--cpu-perf",
        "--kernels",
        NAME,
        "--project",
        str(planted["folder"]),
        "--out",
        str(artifact),
        "--no-progress",
    )
    doc = json.loads(artifact.read_text())
    assert {c["kernel"] for c in doc["cases"]} == {NAME}
    assert len(doc["accuracy"]) == 8 and all(a["passed"] for a in doc["accuracy"]), doc["accuracy"]
    assert {c["key"]: c["ceiling"] for c in doc["cases"]} == {
        c["key"]: "read" if "/one_pass/" in c["key"] else "copy" for c in doc["cases"]
    }
    # every case carries its spec's facts, what the gate judges a kernel it has never heard of by
    spec = kernels.discover((MODULE,))[NAME]
    declared = {c.key: spec.facts(c).to_data() for c in (*spec.accuracy_cases(), *spec.perf_cases())}
    assert {c["key"]: c["facts"] for c in doc["cases"]} == {c["key"]: declared[c["key"]] for c in doc["cases"]}

    engine = open_database(f"sqlite:///{tmp_path / 'kw.db'}")
    ingest_documents(engine, load_files([artifact]))
    assert fill_missing(engine) == 0  # the run stated every ceiling
    (run,) = queries.latest_complete_runs(engine)
    frame = data.perf_frame(engine, [run], NAME)
    assert not frame.empty and set(frame["kernel"]) == {NAME} and set(frame["ceiling"]) == {"read"}
    key = doc["cases"][0]["key"]
    assert queries.case_info(engine, key)["ceiling"] == ("read" if "/one_pass/" in key else "copy")
    factor, text = data.floor_ceiling({"peak_gbps": 100.0, "peak_read_gbps": 125.0}, frame["ceiling"].iloc[0])
    assert factor == pytest.approx(0.8) and "read ceiling" in text


@pytest.mark.slow
def test_the_launch_plan_checks_take_it(planted) -> None:
    from kernelwatch import kernels
    from kernelwatch.kernels.plan import ASCEND_910B, NVIDIA_H200
    from tests import test_launch_plans as plans

    specs = {NAME: kernels.discover((MODULE,))[NAME]}
    assert plans.grid_violations(ASCEND_910B, specs) == []
    assert plans.unplanned_cases(ASCEND_910B, specs) == []
    assert plans.footprint_overruns(ASCEND_910B, specs) == []
    assert len(plans.plan_sample(specs[NAME], ASCEND_910B)) == 4  # every plan_sample-th of 8
    for info in (None, ASCEND_910B, NVIDIA_H200):
        plans.check_launchers(specs[NAME], info)


def test_the_compile_checks_listing_takes_it(planted) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelwatch.collect.compile_check",
            "--list",
            "--targets",
            "cuda-sm80,cuda-sm90",
            "--kernels",
            NAME,
            "--extra-kernels",
            MODULE,
        ],
        cwd=ROOT,
        env=planted["env"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert {line.split()[0] for line in lines} == {"cuda-sm80", "cuda-sm90"}
    assert all(f"{MODULE} _planted_sum_kernel BLOCK=256" in line for line in lines)


def test_synth_draws_its_cases_from_the_specs(planted, tmp_path) -> None:
    from kernelwatch.store import queries
    from kernelwatch.store.engine import open_database

    url = f"sqlite:///{tmp_path / 'synth.db'}"
    _kernelwatch(
        planted["env"], "synth", "--runs", "1", "--cases", "10", "--project", str(planted["folder"]), "--db", url
    )
    engine = open_database(url, readonly=True)
    keys = queries.case_keys(engine, NAME)
    assert keys and {k.split("/")[1] for k in keys} <= {"one_pass", "rows"}


def test_the_synthetic_stand_ins_are_the_real_kernels_and_variants() -> None:
    """kernelwatch.store.synthetic's default kernels (for tests that import no torch) must not drift from the specs."""
    from kernelwatch import kernels
    from kernelwatch.store.synthetic import STAND_INS

    specs = kernels.discover()
    assert {name: variants for name, variants in STAND_INS} == {name: specs[name].variants for name, _ in STAND_INS}
