"""The peers table of stored collector runs: the kernel against the best unfused peer, per case.

    python benchmarks/peers_table.py ci/history/2026-12-02T2206-5e02f011-h200-full-warm-peers-gpu8cb9cd62.json.gz

For every perf case of the runs that has a peer (Liger-Kernel, FlagGems, apex, torch.compile): the kernel's
median GPU time (us), cuBLAS alone where the case has it, the fastest of the peers and torch.compile (named),
and the kernel's speedup over it (> 1: the kernel is faster); then, for the decode cases (``shape=16x``), the
cost of one call with calls back to back against unfused PyTorch (``torch_rms_norm`` / eager). The numbers are
the stored ones (the collector's own timing: graph replay, L2 flushed); nothing is measured here.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from kernelwatch.kernels.names import COMPILE_IMPL, EAGER_IMPL, KERNEL_IMPL, PEER_IMPLS, label
from kernelwatch.store.artifact import load_artifact

RIVALS = (*PEER_IMPLS, COMPILE_IMPL)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("artifacts", nargs="+")
    parser.add_argument("--match", default="", help="only cases whose key contains this")
    args = parser.parse_args()
    for path in args.artifacts:
        doc = load_artifact(path)
        rows: dict[str, dict[str, object]] = defaultdict(dict)
        for p in doc.perf:
            if args.match in p.case and p.median_ms:
                rows[p.case][p.implementation] = p
        print(f"\n## {path}: {doc.hardware.device_name}, {doc.perf[0].device_uuid}, commit {doc.run.commit.sha[:8]}\n")
        print("| case | KernelWatch us | cuBLAS alone | best peer us (which) | vs best peer |")
        print("| --- | ---: | ---: | --- | ---: |")
        decode = []
        for case, impls in sorted(rows.items()):
            rivals = {i: r for i, r in impls.items() if i in RIVALS}
            if KERNEL_IMPL not in impls or not rivals:
                continue
            k = impls[KERNEL_IMPL].median_ms * 1e3
            best = min(rivals, key=lambda i: rivals[i].median_ms)
            b = rivals[best].median_ms * 1e3
            cublas = f"{impls['cublas_linear'].median_ms * 1e3:.1f}" if "cublas_linear" in impls else "-"
            print(f"| `{case}` | {k:.1f} | {cublas} | {b:.1f} ({label(best)}) | {b / k:.2f}x |")
            if "shape=16x" in case:
                decode.append((case, impls))
        if decode:
            print("\n| decode case | KernelWatch call us | unfused PyTorch call us | GPU us |")
            print("| --- | ---: | ---: | ---: |")
            for case, impls in decode:
                unfused = impls.get("torch_rms_norm") or impls.get(EAGER_IMPL)
                k = impls[KERNEL_IMPL]
                u = f"{unfused.call_ms * 1e3:.1f}" if unfused is not None and unfused.call_ms else "-"
                print(f"| `{case}` | {k.call_ms * 1e3:.1f} | {u} | {k.median_ms * 1e3:.1f} |")


if __name__ == "__main__":
    main()
