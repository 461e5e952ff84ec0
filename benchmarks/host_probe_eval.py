"""Does the host probe explain the eager stacks' host-bound figures? (kernelwatch.collect.hostprobe)

    python benchmarks/host_probe_eval.py ci/history/*host-probe*.json.gz

Every implementation of a stack case timed by the wall (``mode=eager``) carries the median of the host probes taken
beside its samples (``host_probe_us``: the host's microseconds per launch of a fixed Triton kernel). If the probe is
the host's speed and the stack's figure is its host path, a figure scaled by its probe should not depend on when or on
which host it was measured. Two checks, each a table:

1. **Within a run**: the 32- and 80-layer stacks of one kernel, shape and implementation run the same calls per
   layer, minutes apart in one worker. Their figures, raw and with the 32-layer one scaled by the probes' ratio as the
   gate reads a baseline (:func:`kernelwatch.gate.suspects.host_reading`: at least the device twin), where both
   were bound by their host (more than 5% above their device twin; else "device-bound").
2. **Across runs** (runs of one kernel code on different GPUs, hence hosts): every eager case of every
   implementation, each ordered pair; the raw ratio and the probe-scaled one.
3. **Sample by sample** (runs that stored each probe, ``host_probe_samples_us``): within each result, the rank
   correlation of each pass's time with the probe taken right after it. A probe that follows the host's moment
   correlates with the host-bound passes, not with the device-bound ones.

The question the gate asks: could a wall-timed case compared across hosts be decided by the scaled figure at the
minimum effect? Only if the scaled ratios of identical code stay within the reach (0.8 x 5% = 4%). The last line
counts them. Exit 0 always: this is evidence, not a gate.
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REACH = 0.04  # UNLIKE_FRACTION x the 5% minimum effect of the stack cases


def _short(case: str) -> str:
    for cut in ("fused_", "/fold_gamma/fp16/bias=False,direction=fwd", ",layout=contiguous", ",shift=0.0"):
        case = case.replace(cut, "")
    return case


def _rows(path: str) -> tuple[str, dict[tuple[str, str], SimpleNamespace]]:
    from kernelwatch.store.artifact import load_artifact

    doc = load_artifact(path)
    gpu = next((p.device_uuid for p in doc.perf if p.device_uuid), "unknown")
    return gpu[:12], {(p.case, p.implementation): p for p in doc.perf if p.median_ms}


def _reading(cand, base, cand_twin, base_twin):
    """The gate's reading where both figures were their hosts' (neither within 5% of its device twin: the cases
    the reading is for; a pass bound by its device says nothing of its host), else None."""
    from kernelwatch.gate.suspects import bound_by_the_device, host_reading

    if bound_by_the_device(cand, cand_twin) or bound_by_the_device(base, base_twin):
        return None
    return host_reading(cand, base, cand_twin, base_twin)


def within_run(gpu: str, rows: dict) -> list[float]:
    print(f"\n### Within the run on {gpu}: 32 against 80 layers, same calls per layer\n")
    print("| stack (80 layers / 32) | implementation | 80: us, probe | 32: us, probe | raw | scaled |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    out = []
    for (case, impl), deep in sorted(rows.items()):
        if "mode=eager" not in case or "layers=80" not in case or deep.host_probe_us is None:
            continue
        shallow = rows.get((case.replace("layers=80", "layers=32"), impl))
        twins = [rows.get((c.replace("mode=eager", "mode=graph"), impl)) for c in (case, case.replace("80", "32"))]
        if shallow is None or shallow.host_probe_us is None or None in twins:
            continue
        r = _reading(deep, shallow, twins[0], twins[1])
        scaled = f"{r.ratio:.3f}" if r else "device-bound"
        if r:
            out.append(r.ratio)
        print(
            f"| {_short(case).replace(',layers=80', '').replace(',mode=eager', '')} | {impl} | "
            f"{deep.median_ms * 1e3:.1f}, {deep.host_probe_us:.1f} | {shallow.median_ms * 1e3:.1f}, "
            f"{shallow.host_probe_us:.1f} | {deep.median_ms / shallow.median_ms:.3f} | {scaled} |"
        )
    return out


def across_runs(runs: list[tuple[str, dict]]) -> list[float]:
    out = []
    pairs = [(a, b) for a, b in itertools.permutations(runs, 2) if a[0] != b[0]]
    print(f"\n### Across runs: {len(pairs)} ordered pairs on different GPUs\n")
    if not pairs:
        print("(fewer than two probed runs on different GPUs: nothing to compare yet)")
        return out
    print("| candidate | baseline | eager cases read | raw within 4% | scaled within 4% | scaled median, worst |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for (gc, cand), (gb, base) in pairs:
        ratios, raw = [], []
        for (case, impl), c in cand.items():
            b = base.get((case, impl))
            twin = (case.replace("mode=eager", "mode=graph"), impl)
            if "mode=eager" not in case or b is None or twin not in cand or twin not in base:
                continue
            r = _reading(c, b, cand[twin], base[twin])
            raw.append(c.median_ms / b.median_ms)
            if r:
                ratios.append(r.ratio)
        out += ratios
        within = sum(abs(x - 1) < REACH for x in ratios)
        worst = max(ratios, key=lambda x: abs(x - 1)) if ratios else float("nan")
        print(
            f"| {gc} | {gb} | {len(raw)} | {sum(abs(x - 1) < REACH for x in raw)} | {within}/{len(ratios)} | "
            f"{statistics.median(ratios) if ratios else float('nan'):.3f}, {worst:.3f} |"
        )
    return out


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    for rank, i in enumerate(order):
        out[i] = float(rank)
    return out


def spearman(a: list[float], b: list[float]) -> float | None:
    """Rank correlation of two equally long lists (ties broken by position), None under 5 pairs or no spread."""
    if len(a) != len(b) or len(a) < 5:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return cov / var if var else None


def sample_by_sample(runs: list[tuple[str, dict]]) -> None:
    rows = [
        (gpu, case, impl, r)
        for gpu, results in runs
        for (case, impl), r in sorted(results.items())
        if len(r.host_probe_samples_us) == len(r.samples_ms) >= 5
    ]
    print(f"\n### Sample by sample: {len(rows)} results with a probe after each sample\n")
    if not rows:
        print("(no run stored each probe yet: collects from this version on do)")
        return
    print("| GPU | stack | implementation | passes | us a layer (median) | probes, us (min-max) | rank correlation |")
    print("| --- | --- | --- | ---: | ---: | --- | ---: |")
    for gpu, case, impl, r in rows:
        rho = spearman(r.samples_ms, r.host_probe_samples_us)
        probes = r.host_probe_samples_us
        print(
            f"| {gpu} | {_short(case)} | {impl} | {len(probes)} | {r.median_ms * 1e3:.1f} | "
            f"{min(probes):.1f}-{max(probes):.1f} | {'-' if rho is None else f'{rho:+.2f}'} |"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="run artifacts with host probes (a collect of this version or later)")
    args = ap.parse_args()
    runs = [_rows(p) for p in args.runs]
    runs = [(gpu, rows) for gpu, rows in runs if any(r.host_probe_us for r in rows.values())]
    print(f"{len(runs)} run(s) with host probes: {', '.join(g for g, _ in runs) or 'none'}")
    inside = [x for gpu, rows in runs for x in within_run(gpu, rows)]
    across = across_runs(runs)
    sample_by_sample(runs)
    for name, ratios in (("within runs", inside), ("across runs", across)):
        if ratios:
            spread = sorted(abs(x - 1) for x in ratios)
            print(
                f"\n{name}: {len(ratios)} scaled ratios of identical calls, "
                f"{sum(d < REACH for d in spread)} within {REACH:.0%}; median |r-1| {statistics.median(spread):.1%}, "
                f"worst {spread[-1]:.1%}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
