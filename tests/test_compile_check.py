"""`make compile-check`'s machinery: the job list comes from the plans, and a kernel that does not compile
is reported with its target, kernel, configuration and first error line (real Triton, no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import os, sys, tempfile, warnings
    warnings.filterwarnings("ignore")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    import triton
    import triton.language as tl
    from kernelwatch.collect import compile_check as cc
    from kernelwatch.kernels.plan import Footprint, Launch

    @triton.jit
    def planted_broken_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, undefined_name, mask=offs < n)

    @triton.jit
    def planted_good_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.zeros([BLOCK], tl.float32), mask=offs < n)

    jobs, _ = cc.enumerate_jobs(["cuda-sm80", "ascend-910b3"])
    keys = [(j.target, j.kernel, j.signature, j.constexprs, j.num_warps, j.num_stages) for j in jobs]
    assert len(keys) == len(set(keys)), "duplicate jobs"
    names = {j.kernel for j in jobs}
    assert {"_softmax_fwd_kernel", "_softmax_fwd_persistent_kernel", "_fused_rmsnorm_matmul_kernel",
            "_fused_rmsnorm_matmul_persistent_kernel", "_mse_atomic_persistent_kernel"} <= names, names
    assert all(j.cube_vector == j.kernel.startswith("_fused") for j in jobs if j.target == "ascend-910b3")

    planted = []
    for fn in (planted_broken_kernel, planted_good_kernel):
        step = Launch(fn, (1,), {"BLOCK": 64}, {"x_ptr": "*fp32", "n": "i32"}, 4, None, Footprint(()))
        job = cc.Job("cuda-sm80", "planted", fn.__name__, tuple(step.signature.items()), (("BLOCK", "64"),), 4,
                     None, False, "fp32", 1)
        cc._JOBS.append(job)
        cc._STEPS[job] = step
        planted.append(cc.compile_one(len(cc._JOBS) - 1))
    bad, good = planted
    assert not bad.ok and bad.error.startswith("CompilationError"), bad.error
    assert "undefined_name" in bad.error, bad.error
    assert good.ok and good.detail.startswith("cubin"), good
    cc.print_summary(planted, 1.0)
""")


def test_planted_compile_failure_is_reported_and_plans_give_the_jobs(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # compile, do not interpret
    env["PYTHONPATH"] = str(ROOT)
    script = tmp_path / "planted_compile.py"  # @triton.jit needs its source in a file
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    fail = [line for line in out.stdout.splitlines() if line.startswith("FAIL ")]
    assert len(fail) == 1 and fail[0].startswith("FAIL cuda-sm80 planted_broken_kernel BLOCK=64 num_warps=4")
    assert "2 configurations compiled, 1 failed" in out.stdout
