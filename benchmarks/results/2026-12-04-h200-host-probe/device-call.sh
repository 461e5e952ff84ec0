#!/usr/bin/env bash
# One device call of session 17 on an H200, every output copied to $OUT as it is written:
#  1. restore the compiler caches an earlier call kept (.kw-local/cache.tar.xz.part-*, as actions/cache does in
#     ci/workflows/nightly-nvidia.yml);
#  2. the nightly of this commit as the workflow runs it (benchmarks/judge_eval.py --experiments nightly): collect,
#     gate --baseline main against the committed history and the runs of earlier calls (.kw-local/runs/), confirm,
#     gate;
#  3. `confirm` of this commit against itself on the cases of CASES_FILE (judge_eval's aa) while time is left;
#  4. the compiler caches, for the next call.
# Usage: device-call.sh DEADLINE_S CASES_FILE
set -u
deadline=$1; cases_file=$2
t0=$(date +%s); here=$PWD; res=/tmp/res; mkdir -p $res/nightly $res/aa
left() { echo $(( deadline - ($(date +%s) - t0) )); }
exec > >(tee $OUT/log.txt) 2>&1
keep() { tar -C $res -czf $OUT/reports.tmp . && mv $OUT/reports.tmp $OUT/reports.tar.gz; }
( while sleep 20; do keep 2>/dev/null; done ) &
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:/tmp/main
nvidia-smi --query-gpu=uuid,name,driver_version,clocks.max.sm,power.limit --format=csv
lscpu | grep -E "Model name|^CPU\(s\)|Thread|MHz" ; cat /proc/loadavg
git clone -q -b main .kw-local/repo.bundle /tmp/main || exit 9
if ls $here/.kw-local/cache.tar.xz.part-* >/dev/null 2>&1; then
  mkdir -p ~/.cache && cat $here/.kw-local/cache.tar.xz.part-* | tar -C ~/.cache -xJf - && echo "caches restored"
fi
git -C /tmp/main log --oneline -1
cd /tmp/main
others=$(ls $here/.kw-local/runs/*.json.gz 2>/dev/null)
echo "== the nightly: collect, gate, confirm, gate on this GPU ($(left) s left; against: ${others:-the history alone})"
timeout $(( $(left) - 15 )) python3 benchmarks/judge_eval.py --repo /tmp/main --experiments nightly \
  ${others:+--against $others} --out $res/nightly/judge-eval.json
echo "nightly: exit $? ($(left) s left)"
cp $res/nightly/run-*.json.gz $OUT/ 2>/dev/null
keep
if [ $(left) -gt 90 ]; then
  echo "== aa on $(wc -w < $here/$cases_file) cases ($(left) s left)"
  timeout $(( $(left) - 25 )) python3 benchmarks/judge_eval.py --repo /tmp/main --experiments aa --no-history \
    --cases $(cat $here/$cases_file) --deadline-s $(( $(left) - 55 )) --out $res/aa/judge-eval.json
fi
keep
[ $(left) -gt 12 ] && tar -C ~/.cache -cf - kernelwatch | xz -1 -T0 > $OUT/cache.tar.xz
echo "call done in $(( $(date +%s) - t0 )) s"
