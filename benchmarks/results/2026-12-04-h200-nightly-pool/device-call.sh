#!/usr/bin/env bash
# One device call of session 14, a pool runner's night on a fresh H200 (benchmarks/judge_eval.py):
#  1. restore the compiler caches an earlier night kept (.kw-local/cache.tar.xz.part-* into ~/.cache/kernelwatch, as
#     actions/cache does in ci/workflows/nightly-nvidia.yml);
#  2. finish the nightly of each run an earlier GPU collected (.kw-local/pending/*.json.gz): gate --baseline
#     main, confirm, gate, on this GPU;
#  3. this commit's nightly (MODE "nightly": collect, gate, confirm, gate against the committed history and the
#     earlier GPUs' runs in .kw-local/runs/; MODE "collect": the collect alone);
#  4. keep the caches (cache.tar.xz.part-*) when none were restored;
#  5. EXPERIMENTS (aa, planted) with the rest of the options, until DEADLINE_S after the call began.
# Usage: device-call.sh MODE DEADLINE_S [EXPERIMENTS [judge_eval options]]
set -u
mode=$1; deadline=$2; experiments=${3:-}; shift 2; [ $# -gt 0 ] && shift
t0=$(date +%s); here=$PWD; res=/tmp/res; mkdir -p $res
left() { echo $(( deadline - ($(date +%s) - t0) )); }
exec > >(tee $OUT/log.txt) 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site:/tmp/main
nvidia-smi --query-gpu=uuid,name,driver_version,clocks.max.sm,power.limit --format=csv
rm -rf /tmp/main && git clone -q -b main .kw-local/repo.bundle /tmp/main || exit 9
git -C /tmp/main log --oneline -1
restored=no
if ls $here/.kw-local/cache.tar.xz.part-* >/dev/null 2>&1; then
  mkdir -p ~/.cache && cat $here/.kw-local/cache.tar.xz.part-* | tar -C ~/.cache -xJf - && restored=yes
fi
echo "compiler caches restored: $restored ($(du -sh ~/.cache/kernelwatch 2>/dev/null | cut -f1))"
cd /tmp/main
for pending in $here/.kw-local/pending/*.json.gz; do
  [ -f "$pending" ] || continue
  others=$(ls $here/.kw-local/runs/*.json.gz 2>/dev/null | grep -v "/$(basename $pending)$")
  echo "== the nightly of $(basename $pending) after its collect, on this GPU ($(left) s left)"
  timeout $(left) python3 benchmarks/judge_eval.py --repo /tmp/main --experiments nightly --artifact $pending \
    ${others:+--against $others} --out $res/pending/judge-eval.json | grep -v "^\[judge-eval.*\] aa \["
done
runs=$(ls $here/.kw-local/runs/*.json.gz 2>/dev/null)
echo "== this commit's $mode on this GPU ($(left) s left)"
timeout $(left) python3 benchmarks/judge_eval.py --repo /tmp/main --experiments $mode ${runs:+--against $runs} \
  --out $res/nightly/judge-eval.json
if [ $restored = no ]; then
  du -sh ~/.cache/kernelwatch/* 2>/dev/null
  find ~/.cache/kernelwatch -type f | sed 's/.*\.//' | sort | uniq -c | sort -rn | head -12
  # the compiled binaries and their metadata; Triton's intermediate IR text is not read back
  tar -C ~/.cache --exclude='*.ptx' --exclude='*.llir' --exclude='*.ttir' --exclude='*.ttgir' -cf - kernelwatch \
    | xz -T0 -6 > $res/cache.tar.xz && ls -la $res/cache.tar.xz
  (cd $res && split -b 15M cache.tar.xz cache.tar.xz.part- && rm cache.tar.xz)
fi
if [ -n "$experiments" ] && [ $(left) -gt 60 ]; then
  echo "== $experiments ($(left) s left)"
  timeout $(left) python3 benchmarks/judge_eval.py --repo /tmp/main --experiments $experiments \
    --deadline-s $(( $(left) - 60 )) --out $res/aa/judge-eval.json "$@" | grep -v "^\[judge-eval.*\] aa \["
fi
cd $res && tar -czf $OUT/reports.tar.gz $(ls */*.txt *.txt 2>/dev/null) 2>/dev/null
for d in pending nightly aa; do [ -f $res/$d/judge-eval.json ] && mkdir -p $OUT/$d && cp $res/$d/judge-eval.json $OUT/$d/; done
cp $res/nightly/run-*.json.gz $OUT/ 2>/dev/null
cp $res/cache.tar.xz.part-* $OUT/ 2>/dev/null
echo "call done in $(( $(date +%s) - t0 )) s"
