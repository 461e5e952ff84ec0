#!/usr/bin/env bash
# Session 15's second device call, on a fresh H200: the full collect with every eager stack case in a worker of
# its own (kernelwatch.collect.pool.isolated), traced (KERNELWATCH_TRACE_WALL=1), then `confirm` of this commit
# against itself (judge_eval.py's aa) on the stack cases no GPU had judged (aa-cases.txt), until DEADLINE_S.
# Usage: device-call-2.sh DEADLINE_S
set -u
deadline=$1; t0=$(date +%s); here=$PWD; res=/tmp/res; mkdir -p $res/nightly $res/aa
left() { echo $(( deadline - ($(date +%s) - t0) )); }
exec > >(tee $OUT/log.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:/tmp/main KERNELWATCH_TRACE_WALL=1
nvidia-smi --query-gpu=uuid,name,driver_version,clocks.max.sm,power.limit --format=csv
rm -rf /tmp/main && git clone -q -b main .kw-local/repo.bundle /tmp/main || exit 9
git -C /tmp/main log --oneline -1
if ls $here/.kw-local/cache.tar.xz.part-* >/dev/null 2>&1; then
  mkdir -p ~/.cache && cat $here/.kw-local/cache.tar.xz.part-* | tar -C ~/.cache -xJf - && echo "caches restored"
fi
cd /tmp/main
echo "== the full collect, eager stack cases each in a fresh worker, traced ($(left) s left)"
timeout $(left) python3 benchmarks/judge_eval.py --repo /tmp/main --experiments collect --out $res/nightly/judge-eval.json
cp $res/nightly/collect-*.txt $res/nightly/run-*.json.gz $OUT/ 2>/dev/null
echo "== aa on the stack cases ($(left) s left)"
timeout $(left) python3 benchmarks/judge_eval.py --repo /tmp/main --experiments aa --no-history \
  --cases $(cat $here/benchmarks/results/2026-12-04-h200-eager-trace/aa-cases.txt) \
  --deadline-s $(( $(left) - 45 )) --out $res/aa/judge-eval.json
cp $res/aa/judge-eval.json $OUT/aa-judge-eval.json 2>/dev/null
echo "call done in $(( $(date +%s) - t0 )) s"
