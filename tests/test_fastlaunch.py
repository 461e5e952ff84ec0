"""The short CUDA launch path's guards, on this machine (no GPU): when it must stay out of the way."""

from __future__ import annotations

import triton

from kernelwatch.kernels import fastlaunch


def test_on_unless_turned_off_and_never_under_the_interpreter(monkeypatch) -> None:
    monkeypatch.delenv("KERNELWATCH_FAST_LAUNCH", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    verified = triton.__version__.rsplit(".", 1)[0] in fastlaunch.VERIFIED
    assert fastlaunch._enabled() == verified and fastlaunch.path() == ("short" if verified else "triton")
    for off in ("0", "false", "No", " off "):
        monkeypatch.setenv("KERNELWATCH_FAST_LAUNCH", off)
        assert not fastlaunch._enabled() and fastlaunch.path() == "triton"
    monkeypatch.setenv("KERNELWATCH_FAST_LAUNCH", "1")
    assert fastlaunch._enabled() == verified
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not fastlaunch._enabled()


def test_an_empty_hook_chain_is_no_hook_and_a_set_one_is() -> None:
    class Chain:
        def __init__(self, calls: list) -> None:
            self.calls = calls

    assert not fastlaunch._hook_set(None)
    assert not fastlaunch._hook_set(Chain([]))
    assert fastlaunch._hook_set(Chain([print]))
    assert fastlaunch._hook_set(print)


def test_the_key_tells_apart_what_triton_specializes_on() -> None:
    key = fastlaunch._int_key
    assert key(1) != key(2) and key(16) != key(17) and key(2**31) != key(2**31 - 16) and key(2**63) != key(2**62)
    assert fastlaunch._arg_key(3.0) == fastlaunch._arg_key(5.5)
    try:
        fastlaunch._arg_key(object())
    except fastlaunch._NotKeyed:
        pass
    else:
        raise AssertionError("an argument the key cannot describe must keep the normal path")


def test_the_by_type_key_is_the_isinstance_key() -> None:
    """The per-call key is looked up by exact type; it must equal the general key for every value kind."""
    import torch

    base = torch.zeros(64, dtype=torch.float16)
    values = [
        base,
        base[1:],
        torch.zeros(3, dtype=torch.int32),
        1,
        16,
        17,
        2**31,
        -(2**31) - 1,
        2**63,
        0.5,
        True,
        False,
        None,
    ]
    for v in values:
        assert fastlaunch._KEY_BY_TYPE[type(v)](v) == fastlaunch._arg_key(v), v
    assert fastlaunch._tensor_key(base) != fastlaunch._tensor_key(base[1:])  # 2-byte offset: not 16-aligned


def test_every_planned_launch_carries_its_constexprs_in_parameter_order() -> None:
    """The short path hands Triton's launcher the runtime arguments, then the plan's constexpr values in
    parameter order: that holds only if every kernel declares its runtime parameters first and every
    constexpr is planned. Checked for every launch of every case on the H200 and the A100."""
    from kernelwatch.kernels import discover
    from kernelwatch.kernels.plan import NVIDIA_A100, NVIDIA_H200, Launch, kernel_params

    checked = 0
    for spec in discover().values():
        for case in [*spec.perf_cases(), *spec.accuracy_cases()]:
            for step in [*spec.launch_plans(case, NVIDIA_H200), *spec.launch_plans(case, NVIDIA_A100)]:
                if not isinstance(step, Launch):
                    continue
                plain, const = kernel_params(step.fn)
                assert list(step.fn.arg_names) == plain + const, step.name  # runtime parameters first
                assert step._static is not None, step.name  # every constexpr planned: no per-call rebuild
                assert step._static[1] == tuple(step.constexprs[n] for n in const), step.name
                checked += 1
    assert checked


def test_a_tensor_descriptor_is_keyed_by_what_triton_specializes_on() -> None:
    """Host TMA descriptors take the short path too (the decode and Hopper GEMM launches): keyed by
    element type, block shape, padding and alignment, never by the tensor's address or shape."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    a, b = torch.zeros(64, 128, dtype=torch.float16), torch.zeros(32, 256, dtype=torch.float16)
    key = fastlaunch._KEY_BY_TYPE[TensorDescriptor]
    same = key(TensorDescriptor.from_tensor(a, [16, 64])), key(TensorDescriptor.from_tensor(b, [16, 64]))
    assert same[0] == same[1] == fastlaunch._arg_key(TensorDescriptor.from_tensor(a, [16, 64]))
    assert key(TensorDescriptor.from_tensor(a, [16, 32])) != same[0]
    assert key(TensorDescriptor.from_tensor(a.float(), [16, 64])) != same[0]
