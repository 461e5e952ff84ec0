"""Why a graph-replayed 5 us call reads differently on two H200s, and what a graph of many calls does to it.

    python benchmarks/launch_spread.py --out launch.json          # on a GPU: about a minute
    python benchmarks/launch_spread.py --compare a.json b.json    # anywhere: between-GPU spread of two or more

On one GPU, for every launch-bound perf case (``kernelwatch.collect.perf.calls_per_sample`` > 1: MSELoss at
4,096 and 1,048,576 elements) and its kernel and eager PyTorch, ``Backend.device_samples`` (the collector's
timing) is taken ``REPEATS`` times in three ways:

* ``one``: one call replayed per sample, L2 flushed before it (the collector before graph-batch);
* ``one, warm L2``: the same without the flush (what the L2's state is worth);
* ``batch``: a graph of ``LAUNCH_BATCH`` calls per sample, flushed before each replay, divided (the collector now).

and, to split a sample into parts, a graph of one tiny kernel (a 1-element add: a graph's entry and one
launch, no work to speak of) replayed alone and as a graph of ``LAUNCH_BATCH`` of them. Printed per way: the
median over repeats (us), the repeats' spread (sd of log), and the SM clock (NVML, when nvidia-ml-py is
installed). ``--compare`` reads the JSON of runs on several GPUs and prints, per case and way, each GPU's
median and the largest ratio between GPUs: the between-GPU spread before (``one``) and after (``batch``).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

REPEATS = 8
WAYS = ("one", "one, warm L2", "batch")


def _sd_log(values: list[float]) -> float:
    logs = [math.log(v) for v in values]
    return statistics.stdev(logs) if len(logs) > 1 else 0.0


def measure(out: Path) -> None:
    import torch

    from kernelwatch.collect.backends import Backend
    from kernelwatch.collect.inputs import drawn_on
    from kernelwatch.collect.metadata import device_uuid
    from kernelwatch.collect.perf import LAUNCH_BATCH, calls_per_sample
    from kernelwatch.kernels import discover
    from kernelwatch.kernels.names import EAGER_IMPL, KERNEL_IMPL

    class Unflushed(Backend):
        @staticmethod
        def flush(buffer: torch.Tensor) -> None:
            return None

    device = torch.device("cuda")
    backend, warm = Backend(device), Unflushed(device)
    backend.activate()
    clock = _sm_clock()
    uuid = device_uuid(torch.cuda.get_device_properties(0)) or "unknown"
    print(f"device: {torch.cuda.get_device_name(0)}, {uuid}; torch {torch.__version__}")
    rows: dict[str, dict[str, dict[str, float]]] = {}

    def record(label: str, ways: dict[str, tuple]) -> None:
        rows[label] = {}
        for way, (b, fn, calls) in ways.items():
            fn()
            values, mhz = [], []
            for _ in range(REPEATS):
                samples, _ = b.device_samples(fn, rep_ms=20.0, calls=calls)
                values.append(statistics.median(samples) * 1e3)
                mhz.append(clock())
            rows[label][way] = {"us": statistics.median(values), "sd_log": _sd_log(values), "mhz": max(mhz)}
        cells = " | ".join(f"{v['us']:.2f} | {v['sd_log']:.4f}" for v in rows[label].values())
        print(f"| {label} | {cells} | {max(v['mhz'] for v in rows[label].values()):.0f} |")

    head = " | ".join(f"{w} us | sd" for w in WAYS)
    print(f"\n| case / implementation | {head} | MHz |")
    print("| --- |" + " ---: |" * (2 * len(WAYS) + 1))
    tiny = torch.zeros(1, device=device)
    record(
        "tiny kernel (graph entry + one launch)",
        {
            "one": (backend, lambda: tiny.add_(1), 1),
            "one, warm L2": (warm, lambda: tiny.add_(1), 1),
            "batch": (backend, lambda: tiny.add_(1), LAUNCH_BATCH),
        },
    )
    for spec in discover().values():
        for case in spec.perf_cases():
            calls = calls_per_sample(spec, case)
            if calls == 1:
                continue
            with drawn_on(device):
                inputs = spec.make_inputs(case, device, 1234)
            impls = spec.implementations(case, inputs)
            for impl in (KERNEL_IMPL, EAGER_IMPL):
                fn = impls[impl]
                label = f"{case.key.split('/', 1)[1]} / {impl}"
                record(label, {"one": (backend, fn, 1), "one, warm L2": (warm, fn, 1), "batch": (backend, fn, calls)})
    out.write_text(json.dumps({"device_uuid": uuid, "torch": torch.__version__, "rows": rows}, indent=1))
    print(f"\nwrote {out}")


def _sm_clock():
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        return lambda: float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:
        return lambda: float("nan")


def _read(path: Path) -> dict:
    try:
        run = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        sys.exit(f"launch_spread.py: {path}: cannot read it ({type(exc).__name__}: {exc})")
    if not isinstance(run, dict) or not isinstance(run.get("rows"), dict) or not run.get("device_uuid"):
        sys.exit(f"launch_spread.py: {path}: not a file this script wrote with --out (no rows or device_uuid)")
    return run


def compare(paths: list[Path]) -> None:
    if len(paths) < 2:
        sys.exit("launch_spread.py: --compare needs the files of two or more GPUs")
    runs = [_read(p) for p in paths]
    names = [r["device_uuid"].removeprefix("GPU-")[:8] for r in runs]
    if len(set(names)) < len(names):
        print(f"warning: not every run is another GPU ({', '.join(names)})", file=sys.stderr)
    labels = [k for k in runs[0]["rows"] if all(k in r["rows"] for r in runs)]
    print("| case / implementation | way | " + " | ".join(f"{n} us" for n in names) + " | max/min |")
    print("| --- | --- |" + " ---: |" * (len(names) + 1))
    worst = {w: 1.0 for w in WAYS}
    for label in labels:
        for way in WAYS:
            values = [r["rows"][label][way]["us"] for r in runs]
            spread = max(values) / min(values)
            if "tiny" not in label:
                worst[way] = max(worst[way], spread)
            print(f"| {label} | {way} | " + " | ".join(f"{v:.2f}" for v in values) + f" | {spread:.3f} |")
    print(
        "\nlargest between-GPU ratio over the cases (tiny kernel aside): "
        + ", ".join(f"{w} {worst[w]:.3f}" for w in WAYS)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="measure on this machine's GPU and write the JSON here")
    parser.add_argument("--compare", type=Path, nargs="+", help="JSON files of runs on different GPUs")
    args = parser.parse_args()
    if args.compare:
        compare(args.compare)
    elif args.out:
        measure(args.out)
    else:
        parser.error("give --out FILE (measure) or --compare FILE FILE... (read)")


if __name__ == "__main__":
    main()
