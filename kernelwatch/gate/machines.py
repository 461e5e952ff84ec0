"""What machines of one hardware model do to a case's time: the gate's noise constants and machine bounds, as data
keyed by the model (the hardware's device name), measured where the history allowed, and an explicit default
elsewhere that the gate's report names.

Per model (:class:`Machine`):

* ``jitter_ms`` and ``rel_noise``: the between-run noise floor of a case's per-run median on one machine (each run
  a fresh process), sqrt((jitter / t)^2 + rel^2) (``kernelwatch.gate.detect.noise_floor``);
* ``sigma``: per noise class (``kernelwatch.kernels.names.NOISE_CLASSES``), the between-machine standard
  deviation of log(per-run median) between physical GPUs of the model, used when a case's history has too few GPUs
  (``kernelwatch.gate.detect.machine_sigma``);
* ``bound``: per bound class (launch-bound, or the noise class), how much slower one machine of the model may run a
  case than another; past it, a shift the same-run references share is no machine of that model: the run is
  unmeasured (``kernelwatch.gate.detect.machine_bound``);
* ``run_bound``: the same for a whole run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from kernelwatch.kernels.names import NOISE_ATOMIC, NOISE_GEMM, NOISE_LAUNCH, NOISE_MEMORY


@dataclass(frozen=True)
class Machine:
    """The noise constants and machine bounds of one hardware model (see the module's docstring)."""

    model: str
    short: str  # what a message calls a machine of the model
    measured: bool
    source: str
    jitter_ms: float
    rel_noise: float
    sigma: Mapping[str, float]
    bound: Mapping[str, float]
    run_bound: float

    def describe(self, model: str | None = None) -> str:
        """The report's line: whose measurements judge a run on ``model`` (None: this one's own)."""
        if self.measured:
            return f"measured on {self.short}s ({self.source})"
        return (
            f"no measurement for {model or 'this hardware'}: the default, {self.source}, judges its noise and "
            "machine bounds"
        )


H200 = Machine(
    model="NVIDIA H200",
    short="H200",
    measured=True,
    source="ci/history, benchmarks/machine_spread.py and benchmarks/machine_bound.py, 2026-11-30 to 2026-12-03",
    # jitter: 12 MSELoss cases x 4 repeated runs (ci/history/*repeat*.json.gz, 2026-11-30) gave per-case standard
    # deviations of the per-run median of 0.07-0.45 us at every size from 5 us to 470 us: launch and clock jitter,
    # not a share of the time. 0.5 us covers the largest.
    jitter_ms=0.0005,
    # relative: docs/design.md's run-to-run study (30 processes): large memory-bound cases vary by 0.03-0.3%
    # (coefficient of variation of the per-run median).
    rel_noise=0.003,
    # Between-machine noise (docs/design.md "Machines of one model"), measured by benchmarks/machine_spread.py on
    # ci/history (2026-11-30, H200: 2-3 GPUs per commit, the GPU UUID or the machine and device label):
    #   atomic-reduction 40 estimates: median 0.0022, p90 0.0408, max 0.0715
    #   gemm             18 estimates: median 0.0005, p90 0.0058, max 0.0087
    #   memory          140 estimates: median 0.0002, p90 0.0057, max 0.0271
    # Each class takes its largest estimate (an upper bound where each GPU measured a case once), except gemm:
    # ci/history holds RMSNorm+MatMul on three GPUs only, so the larger measurement in docs/design.md is taken:
    # one 4096^3 case over seven runs on four H200s spread 240.8-257.9 us, a standard deviation of 2.4% of the
    # median (range / 2.7 for seven values), rounded up. Atomic reductions' throughput differs between GPUs of one
    # model (7-11% on the two GPUs of one host).
    sigma={NOISE_MEMORY: 0.027, NOISE_ATOMIC: 0.072, NOISE_GEMM: 0.025},
    # Measured by benchmarks/machine_bound.py on ci/history (2026-12-02, H200: 25 GPU groups, 11 of them by UUID;
    # p20 of each implementation's samples, robust to host delay; per-GPU median over runs of one commit): per
    # class, the largest ratio of one case's time on two GPUs (rounded up):
    #   launch-bound 144 pairs: p99 1.52, max 1.70 (torch.compile, MSELoss 1M fp32)
    #   memory 477: p99 1.047, max 1.31 (RMSNorm+MatMul bf16 with its 1/rms pre-pass, the 73812d88 two-GPU session)
    #   atomic-reduction 72: p99 1.080, max 1.11 (MSELoss 268M fp16)
    #   gemm 180: p99 1.045, max 1.045 (cuBLAS beside RMSNorm+MatMul, 9b9d362d); then (2026-12-03, with three
    #     H200s of one CUDA code, --same-code 43d6c970,82af87ea,5e02f011) 352 pairs: p99 1.054, max 1.087, and run
    #     against run on two GPUs up to 1.146 (Liger, FlagGems and cuBLAS at the Llama MLP GEMM, which runs at the
    #     700 W cap with its SM clock set by what ran before: benchmarks/gemm_clock.py). 1.15: past it a GEMM case is
    #     unmeasured; within it a shared shift is "machine", and a machine slowdown past the minimum effect (0.8 of
    #     it across GPUs) is still a suspect that `kernelwatch confirm` decides.
    bound={NOISE_LAUNCH: 1.71, NOISE_MEMORY: 1.31, NOISE_ATOMIC: 1.11, NOISE_GEMM: 1.15},
    # A whole run (the median over one class's cases shared by two GPUs of one commit, 10 pairs of 4-231 cases): at
    # most 1.0449 (launch-bound, 9b9d362d), 1.0137 memory, 1.0062 gemm, 1.0054 atomic-reduction; 1.05 for
    # all.
    run_bound=1.05,
)

MEASURED = {m.model: m for m in (H200,)}
# Any other model: the H200's figures, the only ones measured, named as a default in every report that uses them.
# A model of its own gets an entry of its own in MEASURED once benchmarks/machine_spread.py and machine_bound.py have
# runs of it on several machines to read.
DEFAULT = replace(H200, model="default", measured=False, source="the figures measured on NVIDIA H200s")


def machine_of(device_name: str | None) -> Machine:
    """The measured figures of the model named ``device_name`` (the hardware's device name), else DEFAULT."""
    return MEASURED.get(device_name or "", DEFAULT)
