#!/usr/bin/env bash
# One device call of session 16 on an H200 (benchmarks/judge_eval.py), every output copied to $OUT as it is written:
#  1. restore the compiler caches an earlier night kept (.kw-local/cache.tar.xz.part-*, as actions/cache does in
#     ci/workflows/nightly-nvidia.yml);
#  2. finish the nightly of each run collected by an earlier call (.kw-local/pending/*.json.gz): gate --baseline
#     main against the committed history and .kw-local/runs/, confirm, gate, on this GPU;
#  3. MODE "collect": this commit's full collect (MODE "none": no collect);
#  4. `confirm` of this commit against itself on the cases of CASES_FILE (judge_eval's aa), from case ROTATE on,
#     until DEADLINE_S after the call began.
# Usage: device-call.sh MODE DEADLINE_S CASES_FILE ROTATE
set -u
mode=$1; deadline=$2; cases_file=$3; rotate=${4:-0}
t0=$(date +%s); here=$PWD; res=/tmp/res; mkdir -p $res/pending $res/nightly $res/aa
left() { echo $(( deadline - ($(date +%s) - t0) )); }
exec > >(tee $OUT/log.txt) 2>&1
keep() { tar -C $res -czf $OUT/reports.tmp . && mv $OUT/reports.tmp $OUT/reports.tar.gz; }
( while sleep 20; do keep 2>/dev/null; done ) &
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:/tmp/main
nvidia-smi --query-gpu=uuid,name,driver_version,clocks.max.sm,power.limit --format=csv
if [ ! -d /tmp/main ]; then
  git clone -q -b main .kw-local/repo.bundle /tmp/main || exit 9
  if ls $here/.kw-local/cache.tar.xz.part-* >/dev/null 2>&1; then
    mkdir -p ~/.cache && cat $here/.kw-local/cache.tar.xz.part-* | tar -C ~/.cache -xJf - && echo "caches restored"
  fi
else
  echo "warm machine: /tmp/main and the caches kept from the last call"
fi
git -C /tmp/main log --oneline -1
cd /tmp/main
for pending in $here/.kw-local/pending/*.json.gz; do
  [ -f "$pending" ] || continue
  others=$(ls $here/.kw-local/runs/*.json.gz 2>/dev/null | grep -v "/$(basename $pending)$")
  echo "== the nightly of $(basename $pending) after its collect, on this GPU ($(left) s left)"
  timeout $(left) python3 benchmarks/judge_eval.py --repo /tmp/main --experiments nightly --artifact $pending \
    ${others:+--against $others} --out $res/pending/judge-eval.json
  keep
done
if [ "$mode" = collect ]; then
  echo "== this commit's collect on this GPU ($(left) s left)"
  timeout $(( $(left) - 20 )) python3 benchmarks/judge_eval.py --repo /tmp/main --experiments collect \
    --out $res/nightly/judge-eval.json
  echo "collect: exit $? ($(left) s left)"
  cp $res/nightly/run-*.json.gz $OUT/ 2>/dev/null
  grep -A28 "time by phase" $res/nightly/collect-*.txt | head -28
  keep
fi
if [ $(left) -gt 90 ]; then
  echo "== aa on $(wc -w < $here/$cases_file) cases from $rotate ($(left) s left)"
  timeout $(( $(left) - 10 )) python3 benchmarks/judge_eval.py --repo /tmp/main --experiments aa --no-history \
    --cases $(cat $here/$cases_file) --rotate $rotate --deadline-s $(( $(left) - 45 )) \
    --out $res/aa/judge-eval.json
fi
keep
echo "call done in $(( $(date +%s) - t0 )) s"
