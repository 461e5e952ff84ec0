"""The norm + GEMM machinery both fused kernels share (``fused_rmsnorm_matmul``, ``fused_layernorm_matmul``).

Each of them is one GEMM over K whose normalisation (a per-row scale, or a shift and a scale) is applied in
the prologue or the epilogue; what differs is the row statistics and the epilogue, and that stays in each
kernel's package. Here, once:

* the tile tables per vendor (tuned on the H200 for RMSNorm + MatMul, kernelwatch/kernels/NOTES.md) and the thresholds
  that pick a path: ``tiles`` (the pointer GEMM, autotuned on NVIDIA), ``hopper`` (a row-statistics prepass,
  then a persistent TMA GEMM), ``decode`` (K split over programs at decode shapes);
* the Triton helpers their kernels call (inlined by Triton: moving them here changes no PTX);
* the plan builders (the launches of each path, given each kernel's functions, signature and flags);
* the launch-side pieces: TMA descriptors, the decode scratch, the autotuner, the input checks;
* the error model of the tolerances (one operand rounding, fp32 accumulation) and a case's M, N, K.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from kernelwatch.kernels.plan import (
    Autotuned,
    DeviceInfo,
    Footprint,
    Launch,
    Step,
    descriptor,
    int_type,
    launch,
    launch_autotuned,
    pointer,
)
from kernelwatch.kernels.spec import STACK_MODES, Case, Tolerance, element_size, stack_of

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)

# ---------------------------------------------------------------------------------------------
# Tile configurations, per vendor
# ---------------------------------------------------------------------------------------------
# NVIDIA: the autotuner's candidates (BM, BN, BK, num_stages, num_warps), GROUP_M 8; kernelwatch/kernels/NOTES.md.
CUDA_TILES = (
    (128, 256, 64, 3, 8),
    (128, 128, 64, 4, 8),
    (128, 128, 64, 3, 4),
    (64, 256, 64, 4, 8),
    (128, 64, 64, 4, 4),
    (64, 128, 64, 4, 4),
    (64, 64, 128, 4, 4),
    (16, 64, 256, 4, 4),
    (16, 32, 256, 5, 4),
    (32, 64, 128, 5, 4),
    (16, 128, 128, 4, 4),
    (16, 32, 512, 4, 4),
    (16, 32, 256, 7, 4),
    (32, 32, 256, 5, 4),
)
CUDA_GROUP_M = 8
# Ascend (triton-ascend): cube tiles (BM, BN, BK) in order of preference; the first whose unified-buffer
# estimate fits is used, BM capped by the rows there are. A kernel that mixes cube and vector work aligns
# every tail axis to 512 B (kernelwatch/kernels/plan.py), so BN = 128 (fp32 accumulator rows of 512 B) and BK = 128
# waste nothing, and a (BM, 1) row statistic costs BM x 512 B: the 128x256x64 tile this project started
# with needs 256 KB by this estimate, 128-row tiles sit at the 192 KB limit; 64 rows leave half of it free.
ASCEND_TILES = ((64, 128, 128), (32, 128, 128), (16, 128, 128))
ASCEND_GROUP_M = 8
INTERPRETER_CONFIG = {"BM": 16, "BN": 32, "BK": 32, "GROUP_M": 4}
# Problems smaller than this (M*N*K) skip autotuning: one fixed tile is fine and tuning every small
# accuracy shape cost minutes on the H200 (kernelwatch/kernels/NOTES.md).
AUTOTUNE_MIN_WORK = 1 << 28
SMALL_CUDA_CONFIG = {"BM": 64, "BN": 64, "BK": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
PREPASS_TILE = {"nvidia": (4, 1024), "ascend": (4, 1024), "cpu": (4, 128)}  # (rows, BLOCK_K) of a stats prepass
# Hopper (sm_90), fold_gamma, fp16/bf16, M*N*K >= HOPPER_MIN_WORK: a persistent GEMM that moves its tiles with
# the tensor memory accelerator (TMA) and applies the row statistics in the epilogue, after a prepass that writes
# them (4 or 8 bytes a row). H200, kernelwatch/kernels/NOTES.md: the GEMM alone equals cuBLAS (91.3 vs 91.6 us at
# [1024,8192]x4096); summing x^2 from the shared-memory A tiles inside it cost 45% (and was wrong at BN=256 on
# Triton 3.6), so the sums move to the prepass: one row per program, the whole row in one load (at most
# PREPASS_MAX_BLOCK elements a load).
# (BM, BN, BK, num_stages, num_warps, GROUP_M); 4 stages of 128x256x64 do not fit in shared memory.
HOPPER_GEMM = (128, 256, 64, 3, 8, 8)
PREPASS_MAX_BLOCK = 8192
HOPPER_MIN_WORK = 1 << 23
# Decode (at most DECODE_MAX_M rows), NVIDIA, fold_gamma: the weight read is the whole cost, so K is split
# over SPLITS programs per BN columns to put a program on every SM; the last program of a column block adds
# the partial sums, applies the epilogue and writes (one launch). H200 sweep (kernelwatch/kernels/NOTES.md):
# (BN, BK, SPLITS, stages, warps).
DECODE_MAX_M = 16
DECODE_MIN_WEIGHTS = 1 << 20  # below this the weight read is not what a call waits for
DECODE_TILE = (128, 128, 2, 4, 4)
INTERPRETER_DECODE_TILE = (32, 32, 2, None, None)
PATHS = ("decode", "hopper", "tiles")  # what plan_path returns; each launcher starts each its own way


def bm_cap(m: int) -> int:
    """Tiles much taller than M (decode shapes) are not worth trying."""
    return max(16, triton.next_power_of_2(m))


def cuda_candidates(m: int) -> tuple[tuple[int, int, int, int, int], ...]:
    """The CUDA tiles the autotuner tries for M rows: those no taller than ``bm_cap(M)``, else the last four."""
    kept = tuple(t for t in CUDA_TILES if t[0] <= bm_cap(m))
    return kept or CUDA_TILES[-4:]


def prune(configs: list[Any], named_args: Mapping[str, Any], **kwargs: Any) -> list[Any]:
    """The autotuner's early prune: exactly the candidates of :func:`cuda_candidates`."""
    wanted = cuda_candidates(named_args["M"])
    return [c for c in configs if (c.kwargs["BM"], c.kwargs["BN"], c.kwargs["BK"], c.num_stages, c.num_warps) in wanted]


class LazyAutotuner:
    """The CUDA autotuner of ``kernel`` over CUDA_TILES, built on the first call: ``triton.autotune`` needs an
    active driver, and importing a kernel must not (the Ascend compile check imports it on a machine without one)."""

    def __init__(self, kernel: Any, key: tuple[str, ...]) -> None:
        self.kernel = kernel
        self.key = key
        self._tuner: Any = None

    def __call__(self) -> Any:
        if self._tuner is None:
            configs = [
                triton.Config({"BM": bm, "BN": bn, "BK": bk, "GROUP_M": CUDA_GROUP_M}, num_stages=s, num_warps=w)
                for bm, bn, bk, s, w in CUDA_TILES
            ]
            self._tuner = triton.autotune(
                configs=configs, key=list(self.key), prune_configs_by={"early_config_prune": prune}
            )(self.kernel)
        return self._tuner


# ---------------------------------------------------------------------------------------------
# Triton helpers (inlined into each kernel that calls them)
# ---------------------------------------------------------------------------------------------
@triton.jit
def round_to_bf16(v):
    """fp32 -> the nearest bf16 value, ties to even, returned as fp32 (so a later cast is exact).

    On a GPU ``v.to(tl.bfloat16)`` rounds to nearest even. Triton's CPU interpreter (3.9) truncates
    fp32 -> bf16 instead (its ``cast_impl`` passes no rounding mode), an error of up to one ulp with
    the sign of -v: measured on the interpreter, prologue_gamma's worst bf16 budget over 20 seeds went
    from 1.13 to 0.76 (shape 2x5x96) once x*gamma and the output were rounded here. Bit trick: add
    0x7FFF plus the lowest kept bit, then clear the 16 dropped bits (the carry rounds up into the
    exponent correctly, up to inf). NaN passes through unchanged; subnormals are not expected here (the
    interpreter's own cast flushes them).
    """
    bits = v.to(tl.uint32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return tl.where(v != v, v, bits.to(tl.float32, bitcast=True))


@triton.jit
def gemm_tile_ids(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(row block, column block) of output tile ``tile``, walking GROUP_M row blocks at a time."""
    group = GROUP_M * num_pid_n
    first_m = (tile // group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    return first_m + (tile % group) % size_m, (tile % group) // size_m


@triton.jit
def dot_acc(a, b, acc, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    """acc + a @ b for the pointer GEMM's K loop."""
    if UPCAST:  # Triton's CPU interpreter multiplies bf16 tiles wrongly; fp32 products are exact
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    elif IEEE:
        acc = tl.dot(a, b, acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def tma_tile_acc(a_desc, b_desc, pid_m, pid_n, k_tiles, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    """One output tile of the Hopper GEMM, x W'^T over all of K, its tiles moved by TMA descriptors."""
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for ki in range(k_tiles):
        a = a_desc.load([pid_m * BM, ki * BK])
        b = b_desc.load([pid_n * BN, ki * BK])
        acc = tl.dot(a, b.T, acc)
    return acc


@triton.jit
def decode_operands(x_ptr, w, rows, cols, k0, kk, M, N, K, stride_xm, pid_n, BN: tl.constexpr, W_DESC: tl.constexpr):
    """The x rows and the W' columns of one step of the decode kernel's share of K. ``w`` is a TMA descriptor
    of W' when W_DESC (Hopper), else its pointer (rows of K contiguous elements)."""
    k_ok = (k0 + kk) < K
    a = tl.load(
        x_ptr + rows[:, None].to(tl.int64) * stride_xm + (k0 + kk)[None, :],
        mask=(rows < M)[:, None] & k_ok[None, :],
        other=0.0,
    )
    if W_DESC:
        b = w.load([pid_n * BN, k0])
    else:
        b = tl.load(
            w + cols[:, None].to(tl.int64) * K + (k0 + kk)[None, :],
            mask=(cols < N)[:, None] & k_ok[None, :],
            other=0.0,
        )
    return a, b


@triton.jit
def decode_store(y_ptr, count_ptr, total, rows, cols, pid_n, M, N, UPCAST: tl.constexpr):
    """The last program of column block ``pid_n``: y = total (rounded first in the interpreter's bf16), then the
    column block's counter back to zero for the next launch."""
    if UPCAST:
        total = round_to_bf16(total)
    tl.store(
        y_ptr + rows[:, None].to(tl.int64) * N + cols[None, :],
        total.to(y_ptr.dtype.element_ty),
        mask=(rows < M)[:, None] & (cols < N)[None, :],
    )
    tl.atomic_xchg(count_ptr + pid_n, 0)


# ---------------------------------------------------------------------------------------------
# Launch plans: pure functions of (M, N, K, dtype, device description) and each kernel's functions
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """The launches of one forward and the path they take (one of :data:`PATHS`): a launcher dispatches on
    ``path``, never on which function a launch holds."""

    path: str
    steps: tuple[Step, ...]


def plan_path(m: int, n: int, k: int, dtype: str, fold: bool, device: DeviceInfo, dense: bool = True) -> str:
    """Which launches serve the problem (the one place that decides): ``decode`` (split-K, at most DECODE_MAX_M
    rows of a large weight), ``hopper`` (prepass + TMA GEMM, when ``dense``: x's rows contiguous, every row and
    the weight's 16-byte aligned, as TMA requires) or ``tiles`` (the pointer GEMM). Only the folded-gamma
    variants in fp16/bf16 take the first two. The interpreter takes the decode path too, on small shapes, so
    the CPU tests run it."""
    kind = device.vendor
    half = dtype in ("fp16", "bf16")
    decode_size = (kind == "nvidia" and n * k >= DECODE_MIN_WEIGHTS) or (kind == "cpu" and n >= 32)
    if fold and half and m <= DECODE_MAX_M and decode_size:
        return "decode"
    if (
        fold
        and half
        and kind == "nvidia"
        and dense
        and (device.capability or 0) >= 90
        and m > DECODE_MAX_M
        and m * n * k >= HOPPER_MIN_WORK
        and not (device.interpreter and dtype == "bf16")
    ):  # the interpreter's bf16 dots are wrong
        return "hopper"
    return "tiles"


def gemm_ints(m: int, n: int, k: int) -> str:
    """The integer type of the GEMM's sizes and strides."""
    return int_type(max(m * k, n * k, m * n))


def ascend_tile(m: int, dtype: str, fits: Callable[[int, int, int], bool], kernel: str) -> tuple[int, int, int]:
    """The first of ASCEND_TILES (BM capped by the rows) whose unified-buffer footprint ``fits(bm, bn, bk)``."""
    for bm, bn, bk in ASCEND_TILES:
        bm = min(bm, bm_cap(m))
        if fits(bm, bn, bk):
            return bm, bn, bk
    raise ValueError(f"{kernel}: no Ascend tile fits the unified buffer for {dtype}")


def tiles_step(
    m: int,
    n: int,
    k: int,
    dtype: str,
    device: DeviceInfo,
    kernels: tuple[Any, Any],
    signature: Mapping[str, str],
    flags: Mapping[str, Any],
    footprint: Callable[[int, int, int], Footprint],
    autotune_key: tuple[str, ...],
    kernel: str,
) -> Step:
    """The pointer GEMM: ``kernels`` = (one tile per program, persistent over one program per cube core).
    Autotuned over :func:`cuda_candidates` on NVIDIA from AUTOTUNE_MIN_WORK, SMALL_CUDA_CONFIG below; on
    Ascend the first tile of :func:`ascend_tile` that fits; INTERPRETER_CONFIG on the CPU."""
    plain, persistent = kernels

    def gemm(
        fn: Any,
        bm: int,
        bn: int,
        bk: int,
        group_m: int,
        warps: int | None = None,
        stages: int | None = None,
        programs: int | None = None,
    ) -> Launch:
        tiles = triton.cdiv(m, bm) * triton.cdiv(n, bn)
        grid = (min(tiles, programs),) if programs else (tiles,)
        constexprs = {**flags, "BM": bm, "BN": bn, "BK": bk, "GROUP_M": group_m}
        return Launch(fn, grid, constexprs, signature, warps, stages, footprint(bm, bn, bk))

    kind = device.vendor
    if kind == "nvidia" and m * n * k >= AUTOTUNE_MIN_WORK:
        candidates = tuple(gemm(plain, bm, bn, bk, CUDA_GROUP_M, w, s) for bm, bn, bk, s, w in cuda_candidates(m))
        return Autotuned(candidates, autotune_key)
    if kind == "nvidia":
        c = SMALL_CUDA_CONFIG
        return gemm(plain, c["BM"], c["BN"], c["BK"], c["GROUP_M"], c["num_warps"], c["num_stages"])
    if kind == "ascend":
        bm, bn, bk = ascend_tile(m, dtype, lambda bm, bn, bk: footprint(bm, bn, bk).fits(), kernel)
        return gemm(persistent, bm, bn, bk, ASCEND_GROUP_M, programs=device.cube_units)
    c = INTERPRETER_CONFIG
    return gemm(plain, c["BM"], c["BN"], c["BK"], c["GROUP_M"])


def prepass_step(
    m: int,
    k: int,
    device: DeviceInfo,
    kernels: tuple[Any, Any],
    signature: Mapping[str, str],
    one_row: bool,
    footprint: Callable[[int, int], Footprint] | None = None,
) -> Launch:
    """The row-statistics prepass, ``kernels`` = (plain, persistent): with ``one_row`` (before the Hopper GEMM)
    one row per program, the whole row in one load; else PREPASS_TILE rows a program, persistent on Ascend."""
    plain, persistent = kernels
    if one_row:
        block_k = min(triton.next_power_of_2(k), PREPASS_MAX_BLOCK)
        return Launch(
            plain,
            (m,),
            {"ROWS": 1, "BLOCK_K": block_k},
            signature,
            8 if block_k >= 8192 else 4,
            footprint=footprint(1, block_k) if footprint else None,
        )
    rows, block_k = PREPASS_TILE[device.vendor]
    tiles = triton.cdiv(m, rows)
    fn, grid = (persistent, (min(tiles, device.compute_units),)) if device.vendor == "ascend" else (plain, (tiles,))
    return Launch(
        fn,
        grid,
        {"ROWS": rows, "BLOCK_K": block_k},
        signature,
        footprint=footprint(rows, block_k) if footprint else None,
    )


def hopper_step(
    fn: Any,
    m: int,
    n: int,
    k: int,
    dtype: str,
    device: DeviceInfo,
    epilogue: Mapping[str, str],
    flags: Mapping[str, Any],
    tail: Mapping[str, Any] | None = None,
    launch_pdl: bool = False,
) -> Launch:
    """The persistent TMA GEMM ``fn(a_desc, b_desc, c_desc, *epilogue, M, N, K, *flags, BM, BN, BK, GROUP_M,
    NUM_SMS, *tail)``: one program per SM at most, HOPPER_GEMM's tile."""
    ints = gemm_ints(m, n, k)
    bm, bn, bk, stages, warps, group_m = HOPPER_GEMM
    programs = min(device.compute_units, triton.cdiv(m, bm) * triton.cdiv(n, bn))
    sig = {
        "a_desc": descriptor(dtype, (bm, bk)),
        "b_desc": descriptor(dtype, (bn, bk)),
        "c_desc": descriptor(dtype, (bm, bn)),
        **epilogue,
        "M": ints,
        "N": ints,
        "K": ints,
    }
    constexprs = {**flags, "BM": bm, "BN": bn, "BK": bk, "GROUP_M": group_m, "NUM_SMS": programs, **(tail or {})}
    return Launch(fn, (programs,), constexprs, sig, warps, stages, launch_pdl=launch_pdl)


def decode_step(
    fn: Any,
    m: int,
    n: int,
    k: int,
    dtype: str,
    device: DeviceInfo,
    w_desc: bool,
    scratch: Mapping[str, str],
    tail: Mapping[str, str],
    flags: Mapping[str, Any],
) -> Launch:
    """The split-K decode GEMM ``fn(x_ptr, w, part_ptr, *scratch, y_ptr, M, N, K, stride_xm, *tail, *flags,
    W_DESC, UPCAST, SPLITS, BM, BN, BK)``: (column blocks, SPLITS) programs, DECODE_TILE on NVIDIA."""
    bn, bk, splits, stages, warps = DECODE_TILE if device.vendor == "nvidia" else INTERPRETER_DECODE_TILE
    ints = gemm_ints(m, n, k)
    sig = {
        "x_ptr": pointer(dtype),
        "w": descriptor(dtype, (bn, bk)) if w_desc else pointer(dtype),
        "part_ptr": "*fp32",
        **scratch,
        "y_ptr": pointer(dtype),
        "M": ints,
        "N": ints,
        "K": ints,
        "stride_xm": ints,
        **tail,
    }
    constexprs = {
        **flags,
        "W_DESC": w_desc,
        "UPCAST": device.interpreter and dtype == "bf16",
        "SPLITS": splits,
        "BM": bm_cap(m),
        "BN": bn,
        "BK": bk,
    }
    return Launch(fn, (triton.cdiv(n, bn), splits), constexprs, sig, warps, stages)


# ---------------------------------------------------------------------------------------------
# Launch side
# ---------------------------------------------------------------------------------------------
def check_inputs(
    kernel: str,
    x: torch.Tensor,
    weight: torch.Tensor,
    gamma: torch.Tensor,
    bias: torch.Tensor | None,
    beta: torch.Tensor | None = None,
) -> None:
    """x ``[..., K]``, weight ``[N, K]``, gamma (and beta, when given) ``[K]``, bias ``[N]`` or None: tensors of
    x's dtype (fp16, bf16 or fp32) on x's device."""
    named = [("x", x), ("weight", weight), ("gamma", gamma), ("beta", beta), ("bias", bias)]
    for name, t in named:
        if t is None and name in ("beta", "bias"):
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{kernel}: {name} must be a tensor")
        if t.dtype != x.dtype:
            raise TypeError(f"{kernel}: {name} dtype {t.dtype} != x dtype {x.dtype}")
        if t.device != x.device:
            raise ValueError(f"{kernel}: {name} on {t.device}, x on {x.device}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{kernel}: dtype {x.dtype} is not supported (fp16, bf16, fp32)")
    if x.dim() < 1 or weight.dim() != 2 or gamma.dim() != 1:
        raise ValueError(
            f"{kernel}: expected x [..., K], weight [N, K], gamma [K]; got "
            f"{tuple(x.shape)}, {tuple(weight.shape)}, {tuple(gamma.shape)}"
        )
    k = x.shape[-1]
    if weight.shape[1] != k or gamma.shape[0] != k or (beta is not None and tuple(beta.shape) != (k,)):
        raise ValueError(
            f"{kernel}: K mismatch: x has K={k}, weight {tuple(weight.shape)}, gamma {tuple(gamma.shape)}"
            + (f", beta {tuple(beta.shape)}" if beta is not None else "")
        )
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"{kernel}: bias shape {tuple(bias.shape)} != [{weight.shape[0]}]")


_folds = 0  # W diag(gamma) computed in this process: what the tests of the weight caches count


def fold_gamma(weight: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """W' = W diag(gamma), rounded to W's dtype, contiguous."""
    global _folds
    _folds += 1
    with torch.no_grad():
        return (weight.float() * gamma.float()[None, :]).to(weight.dtype).contiguous()


def folds() -> int:
    """How many times :func:`fold_gamma` ran in this process."""
    return _folds


def _stamp(tensors: tuple[torch.Tensor | None, ...]) -> tuple:
    """(object, version, storage) of each tensor; an inference tensor has no version counter (it cannot be
    changed in place outside inference mode), so it stands as -1."""
    try:
        return tuple((id(t), t._version, t.data_ptr()) if t is not None else None for t in tensors)
    except RuntimeError:
        return tuple(
            (id(t), -1 if t.is_inference() else t._version, t.data_ptr()) if t is not None else None for t in tensors
        )


class WeightSlot:
    """What a forward derives from one set of parameter tensors: ``value`` (a folded weight, say), ``descs``
    (TMA descriptors of it by block shape) and ``calls`` (a launcher per input key), kept while the tensors are
    unchanged: the same objects, the same storage (``data_ptr``: ``p.data = t`` and ``module.to()`` swap it)
    and the same version (in-place updates bump it, an optimizer's step among them). An in-place update made
    through ``p.data`` bumps no version PyTorch keeps on ``p``: :meth:`reset` after one.

    A module owns one (:class:`~kernelwatch.kernels.fused_rmsnorm_matmul.api.FusedRMSLinear`); the functional
    API takes one from a :class:`WeightCache`. ``builds`` counts the values made."""

    __slots__ = ("_stamp", "value", "descs", "calls", "builds")

    def __init__(self) -> None:
        self._stamp: tuple | None = None
        self.value: Any = None
        self.descs: dict = {}
        self.calls: dict = {}
        self.builds = 0

    def current(self, tensors: tuple[torch.Tensor | None, ...]) -> bool:
        """Whether ``value`` was made from exactly these tensors as they are now."""
        return self._stamp is not None and _stamp(tensors) == self._stamp

    def rebuild(self, tensors: tuple[torch.Tensor | None, ...], make: Callable[[], Any]) -> Any:
        """``make()`` as the new value (nothing is replaced when it raises); descriptors and launchers go."""
        value = make()
        self.value, self.descs, self.calls = value, {}, {}
        self._stamp = _stamp(tensors)
        self.builds += 1
        return value

    def get(self, tensors: tuple[torch.Tensor | None, ...], make: Callable[[], Any]) -> Any:
        return self.value if self.current(tensors) else self.rebuild(tensors, make)

    def reset(self) -> None:
        self._stamp = None


class WeightCache:
    """A :class:`WeightSlot` per tuple of tensors (and a tag), living exactly as long as every one of them.

    No capacity: a model of any depth keeps one fold per layer (a 16-entry FIFO refolded every weight of a
    32-layer stack on every call, 3-23x slower than unfused PyTorch on an H200: kernelwatch/kernels/NOTES.md,
    "Stacks of layers"). A tensor's death drops its entries (``weakref.finalize``), so weights made per call cost
    a fold per call and leave nothing behind."""

    def __init__(self) -> None:
        self._slots: dict[tuple, WeightSlot] = {}

    def slot(self, tensors: tuple[torch.Tensor | None, ...], tag: Any = None) -> WeightSlot:
        key = (*(id(t) for t in tensors), tag)
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = WeightSlot()
            for t in tensors:
                if t is not None:
                    weakref.finalize(t, self._drop, key, slot).atexit = False
        return slot

    def _drop(self, key: tuple, slot: WeightSlot) -> None:
        if self._slots.get(key) is slot:
            del self._slots[key]

    def __len__(self) -> int:
        return len(self._slots)

    def clear(self) -> None:
        self._slots.clear()


def dense(x2: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> bool:
    """What TMA descriptors need: unit inner strides, 16-byte aligned rows and bases."""
    size = x2.element_size()
    return (
        x2.stride(1) == 1
        and w.stride(1) == 1
        and (x2.stride(0) * size) % 16 == 0
        and (w.stride(0) * size) % 16 == 0
        and (y.stride(0) * size) % 16 == 0
        and all(t.data_ptr() % 16 == 0 for t in (x2, w, y))
    )


def tensor_descriptor(t: torch.Tensor, block: tuple[int, int]) -> Any:
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor.from_tensor(t, list(block))


def descriptor_template(t: torch.Tensor, block: tuple[int, int]) -> Any:
    """A descriptor of ``t``'s shape and strides, checked once by Triton, holding no tensor: :func:`rebased`
    puts each call's tensor of that shape, strides and alignment into a copy without checking again."""
    desc = tensor_descriptor(t, block)
    desc.base = None
    return desc


def rebased(template: Any, t: torch.Tensor) -> Any:
    """``template`` over ``t`` (same shape, strides and 16-byte alignment as the tensor it was made from)."""
    desc = object.__new__(type(template))
    desc.__dict__.update(template.__dict__)
    desc.base = t
    return desc


def weight_descriptor(w: torch.Tensor, descs: dict, block: tuple[int, int]) -> Any:
    """W's descriptor from ``descs`` (a weight cache's, built once per weight version and block shape)."""
    desc = descs.get(block)
    if desc is None:
        desc = descs[block] = tensor_descriptor(w, block)
    return desc


class DecodeScratch:
    """The decode kernel's scratch, kept per device: fp32 partial sums (and per-row sums) and a zeroed int32
    counter per column block that the last program resets. Two decode calls running at once on different
    streams of one device would share them."""

    def __init__(self) -> None:
        self._held: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        self._views: dict[tuple, tuple[torch.Tensor, ...]] = {}

    def buffers(self, device: torch.device, floats: int, blocks: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(at least ``floats`` fp32, at least ``blocks`` zeroed counters)."""
        held = self._held.get(device)
        if held is None or held[0].numel() < floats or held[1].numel() < blocks:
            held = self._held[device] = (
                torch.empty(max(floats, 1 << 20), dtype=torch.float32, device=device),
                torch.zeros(max(blocks, 1024), dtype=torch.int32, device=device),
            )
            self._views.clear()  # views of the old buffers must not outlive them
        return held

    def views(self, step: Launch, device: torch.device, row_sums: int) -> tuple[torch.Tensor, ...]:
        """(partials, ``row_sums`` per-row partial sums, counters) for a :func:`decode_step` launch: views cut once
        per launch shape."""
        c = step.constexprs
        blocks, splits, bm = step.grid[0], c["SPLITS"], c["BM"]
        part_floats, sum_floats = blocks * splits * bm * c["BN"], blocks * splits * bm
        key = (device, part_floats, sum_floats, row_sums, blocks)
        views = self._views.get(key)
        if views is None:
            scratch, counts = self.buffers(device, part_floats + row_sums * sum_floats, blocks)
            sums = [scratch[part_floats + i * sum_floats : part_floats + (i + 1) * sum_floats] for i in range(row_sums)]
            views = self._views[key] = (scratch[:part_floats], *sums, counts)
        return views


def decode_weight(step: Launch, w: torch.Tensor, descs: dict) -> Any:
    """W' as a :func:`decode_step` launch takes it: a TMA descriptor (kept in ``descs``) or the tensor."""
    c = step.constexprs
    return weight_descriptor(w, descs, (c["BN"], c["BK"])) if c["W_DESC"] else w


def launch_tiles(step: Step, tuner: LazyAutotuner, flags: tuple[str, ...], m: int, n: int, *args: Any) -> None:
    """Start a :func:`tiles_step` step: through the autotuner (with the constexprs ``flags`` it does not pick)
    when it is :class:`~kernelwatch.kernels.plan.Autotuned`, else as planned."""
    if isinstance(step, Autotuned):
        fixed = {name: step.candidates[0].constexprs[name] for name in flags}
        grid = lambda meta: (triton.cdiv(m, meta["BM"]) * triton.cdiv(n, meta["BN"]),)
        launch_autotuned(step, tuner(), grid, *args, **fixed)
    else:
        launch(step, *args)


# ---------------------------------------------------------------------------------------------
# Spec: the error model both tolerances start from, and a case's sizes
# ---------------------------------------------------------------------------------------------
RTOL = {"fp32": 1e-4, "fp16": 2e-3, "bf16": 1.6e-2}  # >= 4 x the output rounding 2^-24, 2^-11, 2^-8
UNIT_ROUNDOFF = {"fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}
OPERAND_SIGMAS = 4.0  # lambda of the tolerances
OPERAND_NORM = 2.0  # S of the tolerances
ACCUMULATION_ATOL = 1e-5  # fp32 accumulation over K = 64, grown with sqrt(K)


def operand_atol(dtype: str) -> float:
    """lambda S u / sqrt(3): one operand rounding to ``dtype`` (each kernel's ``tolerance`` says why)."""
    return OPERAND_SIGMAS * OPERAND_NORM * UNIT_ROUNDOFF[dtype] / math.sqrt(3)


def accumulation_atol(k: int) -> float:
    """fp32 accumulation of K products: ACCUMULATION_ATOL sqrt(K / 64) (random-walk growth)."""
    return ACCUMULATION_ATOL * math.sqrt(max(k, 64) / 64)


def case_mnk(case: Case) -> tuple[int, int, int]:
    """(M, N, K) of a case with params ``shape`` (x's) and ``n``."""
    shape = case.p["shape"]
    return math.prod(shape[:-1]), case.p["n"], shape[-1]


def case_dense(case: Case) -> bool:
    """Whether a case's rows suit TMA: fresh allocations are 16-byte aligned, so a contiguous case's are when
    they are whole multiples of 16 bytes."""
    m, n, k = case_mnk(case)
    size = element_size(case.dtype)
    return case.p["layout"] == "contiguous" and (k * size) % 16 == 0 and (n * size) % 16 == 0


# ---------------------------------------------------------------------------------------------
# Stack cases: the kernel as a model calls it, L distinct layers in turn (kernelwatch/kernels/NOTES.md, "Stacks of
# layers")
# ---------------------------------------------------------------------------------------------
# Prefill, mid and decode: the shapes a 32-layer stack ran 3-23x slower than unfused PyTorch at (H200, NOTES.md).
STACK_POINTS = (((1024, 8192), 4096), ((4096, 4096), 4096), ((16, 8192), 8192))
STACK_DEPTHS = (32, 80)  # a Llama-8B-deep stack and a 70B-deep one


def stack_cases(kernel: str, tolerance: Callable[[str, int], Tolerance], **extra: Any) -> list[Case]:
    """The stack cases of a kernel's shipped variant (fold_gamma, fp16): every point, depth and mode."""
    return [
        Case.make(
            kernel,
            "fold_gamma",
            "fp16",
            tolerance("fp16", shape[-1]),
            trials=1,
            shape=shape,
            n=n,
            bias=False,
            layout="contiguous",
            direction="fwd",
            layers=layers,
            mode=mode,
            **extra,
        )
        for shape, n in STACK_POINTS
        for layers in STACK_DEPTHS
        for mode in STACK_MODES
    ]


def stack_inputs(case: Case, device: torch.device, seed: int, beta: bool) -> dict[str, Any]:
    """x and the layers (weight, gamma[, beta]) of a stack case, each layer drawn apart on ``device`` by its own
    generator, with the distributions of the spec's single calls (w ~ N(0, 1/K), gamma ~ U[1, 1.5],
    beta ~ N(0, 1/4)); the sizes of
    :func:`~kernelwatch.kernels.spec.stack_of` on ``device``."""
    stack = stack_of(case, device)
    assert stack is not None, f"{case.key} is not a stack case"
    device = torch.device(device)
    gen = torch.Generator(device=device).manual_seed(seed)  # drawn where they live: 80 decode layers are 5.4 G values

    def draw(*shape: int, uniform: bool = False) -> torch.Tensor:
        rand = torch.rand if uniform else torch.randn
        return rand(shape, generator=gen, device=device, dtype=torch.float32)

    dtype, k, n = case.torch_dtype, stack.shape[-1], stack.n
    x = (draw(*stack.shape) * 2.0).to(dtype)
    layers = []
    for _ in range(stack.layers):
        w = (draw(n, k) / math.sqrt(k)).to(dtype)
        g = (1.0 + 0.5 * draw(k, uniform=True)).to(dtype)
        layers.append((w, g, (0.5 * draw(k)).to(dtype)) if beta else (w, g))
    return {"x": x, "layers": layers, "stack": stack}


def stack_runner(x: torch.Tensor, calls: list[Callable[[torch.Tensor], torch.Tensor]]) -> Callable[[], list]:
    """One pass of the stack: every layer called on x in turn, every output kept until the pass ends."""
    return lambda: [call(x) for call in calls]
