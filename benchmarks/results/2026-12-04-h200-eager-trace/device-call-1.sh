#!/usr/bin/env bash
# Session 15's first device call: why do the collector's eager stack figures move up to 1.8x between H200s?
#  1. restore the compiler caches session 14 kept (.kw-local/cache.tar.xz.part-*), as actions/cache does;
#  2. the full collect of this commit with KERNELWATCH_TRACE_WALL=1 (kernelwatch/collect/walltrace.py: per eager
#     measurement the host's and the device's state, garbage collections, frame hooks, and the pass re-timed
#     with the collector off and with the heap frozen);
#  3. the same eager stack cases again in a fresh collect of only them (a fresh worker, as `confirm` has);
# the two artifacts side by side say whether the long-lived worker reads slower and the trace says why.
# Usage: device-call-1.sh DEADLINE_S
set -u
deadline=$1; t0=$(date +%s); here=$PWD; res=/tmp/res; mkdir -p $res/nightly $res/fresh
left() { echo $(( deadline - ($(date +%s) - t0) )); }
exec > >(tee $OUT/log.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:/tmp/main KERNELWATCH_TRACE_WALL=1
nvidia-smi --query-gpu=uuid,name,driver_version,clocks.max.sm,power.limit --format=csv
nproc; grep -m1 "model name" /proc/cpuinfo
rm -rf /tmp/main && git clone -q -b main .kw-local/repo.bundle /tmp/main || exit 9
git -C /tmp/main log --oneline -1
if ls $here/.kw-local/cache.tar.xz.part-* >/dev/null 2>&1; then
  mkdir -p ~/.cache && cat $here/.kw-local/cache.tar.xz.part-* | tar -C ~/.cache -xJf - && echo "caches restored"
fi
cd /tmp/main
echo "== the full collect, traced ($(left) s left)"
timeout $(left) python3 benchmarks/judge_eval.py --repo /tmp/main --experiments collect --out $res/nightly/judge-eval.json
echo "== the eager stack cases alone, a fresh worker ($(left) s left)"
KERNELWATCH_DB=sqlite:////tmp/fresh.db timeout $(( $(left) - 20 )) python3 -m kernelwatch collect --suite perf \
  --match mode=eager --no-progress --out $res/fresh/run-fresh.json.gz > $res/fresh/collect-fresh.txt 2>&1
echo "fresh collect: exit $?"
cp $res/nightly/collect-*.txt $res/fresh/collect-fresh.txt $OUT/ 2>/dev/null
cp $res/nightly/run-*.json.gz $res/fresh/run-fresh.json.gz $OUT/ 2>/dev/null
echo "call done in $(( $(date +%s) - t0 )) s"
