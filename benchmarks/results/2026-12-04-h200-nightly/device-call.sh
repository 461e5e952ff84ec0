#!/usr/bin/env bash
# One device call of session 13 (benchmarks/judge_eval.py on a fresh H200): the nightly of this commit, cloned
# from a bundle so the run's commit is real (collect with the peers, gate --baseline main against the committed
# history and the runs of this commit from earlier GPUs in .kw-local/runs/, confirm, gate), then EXPERIMENTS
# (aa or planted) until the deadline. Usage: device-call.sh EXPERIMENTS DEADLINE_S [judge_eval options]
set -u
experiments=$1; deadline=$2; shift 2
here=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=uuid,name,driver_version,clocks.max.sm,power.limit --format=csv | tee $OUT/gpu.txt
rm -rf /tmp/main && git clone -q -b main .kw-local/repo.bundle /tmp/main || exit 9
git -C /tmp/main log --oneline -1
cd /tmp/main && export PYTHONPATH=/tmp/site:/tmp/main
against=$(ls $here/.kw-local/runs/*.json.gz 2>/dev/null)
timeout ${KW_TIMEOUT:-575} python3 benchmarks/judge_eval.py --repo /tmp/main --experiments "$experiments" --deadline-s "$deadline" \
  --out $OUT/judge-eval.json ${against:+--against $against} "$@" 2>&1 | tee $OUT/log.txt | grep -v "^\[judge-eval.*\] aa \[" 
echo "judge_eval exit ${PIPESTATUS[0]}"
