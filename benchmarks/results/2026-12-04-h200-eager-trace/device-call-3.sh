#!/usr/bin/env bash
# Session 15's third device call, on a fresh H200 (the second, device-call-2.sh, collected with one fresh worker
# per eager stack case: each restarted Inductor's compile pool and the collect ran past the call's deadline, so
# nothing came back). Now the eager stack cases go first, in the run's first worker
# (kernelwatch.collect.schedule.plan's ``first``), traced; then `confirm` of this commit against itself on the
# stack cases no GPU had judged (aa-cases.txt), until DEADLINE_S. Every output lands in $OUT as it is written.
# Usage: device-call-3.sh DEADLINE_S
set -u
deadline=$1; t0=$(date +%s); here=$PWD
left() { echo $(( deadline - ($(date +%s) - t0) )); }
exec > >(tee $OUT/log.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:/tmp/main KERNELWATCH_TRACE_WALL=1
gpu=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1 | cut -c1-12)
nvidia-smi --query-gpu=uuid,name,driver_version,clocks.max.sm,power.limit --format=csv
rm -rf /tmp/main && git clone -q -b main .kw-local/repo.bundle /tmp/main || exit 9
git -C /tmp/main log --oneline -1
if ls $here/.kw-local/cache.tar.xz.part-* >/dev/null 2>&1; then
  mkdir -p ~/.cache && cat $here/.kw-local/cache.tar.xz.part-* | tar -C ~/.cache -xJf - && echo "caches restored"
fi
cd /tmp/main
echo "== the full collect, eager stack cases first in a fresh worker, traced ($(left) s left)"
KERNELWATCH_DB=sqlite:////tmp/collect.db timeout $(( $(left) - 100 )) python3 -m kernelwatch collect --trigger nightly \
  --device cuda --no-progress --out $OUT/run-$gpu.json.gz > $OUT/collect-$gpu.txt 2>&1
echo "collect: exit $? ($(left) s left)"
grep -A30 "time by phase" $OUT/collect-$gpu.txt | head -30
if [ $(left) -gt 80 ]; then
  mkdir -p /tmp/aa
  timeout $(left) python3 benchmarks/judge_eval.py --experiments aa --no-history \
    --cases $(cat $here/benchmarks/results/2026-12-04-h200-eager-trace/aa-cases.txt) \
    --deadline-s $(( $(left) - 50 )) --out /tmp/aa/judge-eval.json
  cp /tmp/aa/judge-eval.json $OUT/aa-judge-eval.json 2>/dev/null
fi
echo "call done in $(( $(date +%s) - t0 )) s"
