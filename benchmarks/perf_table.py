"""Print the perf suite of run artifacts as one table per kernel (what closing notes paste).

python benchmarks/perf_table.py ci/history/*.json.gz [--match TEXT]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

from kernelwatch.store.artifact import load_artifact, to_data


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("artifacts", nargs="+")
    parser.add_argument("--match", default="")
    args = parser.parse_args()
    for path in args.artifacts:
        doc = to_data(load_artifact(path))
        run, hw = doc["run"], doc["hardware"]
        print(
            f"\n## {path}\n{hw['device_name']} (copy {hw['peak_gbps']} GB/s, bf16 mm {hw['peak_tflops']} TFLOP/s), "
            f"commit {run['commit']['sha'][:8]}, {run['status']}"
        )
        by_case: dict[str, dict[str, dict]] = defaultdict(dict)
        for p in doc["perf"]:
            if args.match in p["case"]:
                by_case[p["case"]][p["implementation"]] = p
        others = sorted({i for impls in by_case.values() for i in impls} - {"triton"})
        head = f"{'case':<78} {'triton us':>10} " + " ".join(f"{o[:13]:>13}" for o in others)
        print(head + f" {'%peak':>6} {'x eager':>7}  target")
        for case, impls in sorted(by_case.items()):
            k = impls.get("triton", {})

            def us(r: dict) -> str:
                return f"{r['median_ms'] * 1e3:.1f}" if r.get("median_ms") else "err"

            row = f"{case:<78} {us(k):>10} " + " ".join(f"{us(impls[o]) if o in impls else '-':>13}" for o in others)
            pct = f"{k['pct_peak']:.1f}" if k.get("pct_peak") else "-"
            sp = f"{k['speedup_vs_eager']:.2f}" if k.get("speedup_vs_eager") else "-"
            met = {True: "met", False: "MISSED", None: ""}[k.get("target_met")]
            print(f"{row} {pct:>6} {sp:>7}  {met} {k.get('target') or ''}".rstrip())


if __name__ == "__main__":
    main()
