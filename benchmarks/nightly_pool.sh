#!/usr/bin/env bash
# The nightly of one commit on every GPU of a host at once, gated against each other: (c) of the judge's
# evaluation in one device call where a multi-GPU machine is lent. Each GPU collects its own run (a clone of
# the bundle per GPU, CUDA_VISIBLE_DEVICES=i), then each run goes through the nightly's steps after collect
# (gate --baseline main against the committed history and the other GPUs' runs, confirm, gate) on its own GPU.
# Usage, from the repository root on the device (the wheels and .kw-local/repo.bundle carried):
#   bash benchmarks/nightly_pool.sh [SECONDS_FOR_COLLECT]
# Everything comes back as "$OUT/pool.tar.gz" (each GPU's judge-eval.json, logs and run) and "$OUT/summary.txt".
# A CPU rehearsal of the plumbing: KW_DEVICE=cpu KW_COLLECT_ARGS="--suite accuracy --match ..." with an nvidia-smi
# stand-in on PATH (tests/test_nightly_pool.py).
set -u
extra=(--device "${KW_DEVICE:-cuda}")
[ -n "${KW_COLLECT_ARGS:-}" ] && extra+=(--collect-args "$KW_COLLECT_ARGS")
limit=${1:-420}
out=${OUT:?the device sets OUT}
py=${PYTHON:-python3}
if compgen -G ".whl/*.whl" > /dev/null; then
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
fi
export PYTHONUNBUFFERED=1
n=$(nvidia-smi -L | wc -l)
nvidia-smi --query-gpu=index,uuid,name,driver_version,power.limit --format=csv | tee "$out/summary.txt"
work=${KW_POOL_DIR:-/tmp/pool}
rm -rf "$work" && mkdir -p "$work"
gpus=$(seq 0 $((n - 1)))
for i in $gpus; do
  git clone -q -b main .kw-local/repo.bundle "$work/repo$i" || exit 9
  mkdir -p "$work/g$i"
done
git -C "$work/repo0" log --oneline -1 | tee -a "$out/summary.txt"
for i in $gpus; do
  (cd "$work/repo$i" && CUDA_VISIBLE_DEVICES=$i PYTHONPATH="/tmp/site:$work/repo$i" timeout "$limit" \
    "$py" benchmarks/judge_eval.py --repo "$work/repo$i" --experiments collect --out "$work/g$i/judge-eval.json" "${extra[@]}" \
    > "$work/g$i/collect.log" 2>&1) &
done
wait
missing=0
for i in $gpus; do
  runs=("$work/g$i"/run-*.json.gz)
  if [ ! -f "${runs[0]}" ]; then
    echo "GPU $i: no run (see g$i/collect.log)" | tee -a "$out/summary.txt"
    missing=$((missing + 1))
    continue
  fi
  others=()
  for j in $gpus; do
    [ "$j" = "$i" ] && continue
    for f in "$work/g$j"/run-*.json.gz; do [ -f "$f" ] && others+=("$f"); done
  done
  (cd "$work/repo$i" && CUDA_VISIBLE_DEVICES=$i PYTHONPATH="/tmp/site:$work/repo$i" \
    "$py" benchmarks/judge_eval.py --repo "$work/repo$i" --experiments nightly --artifact "${runs[0]}" \
    ${others[@]+--against "${others[@]}"} --out "$work/g$i/judge-eval.json" "${extra[@]}" \
    > "$work/g$i/nightly.log" 2>&1) &
done
wait
for i in $gpus; do echo "== GPU $i"; tail -4 "$work/g$i/nightly.log" 2>/dev/null; done | tee -a "$out/summary.txt"
tar -czf "$out/pool.tar.gz" -C "$work" --exclude 'repo*' .
[ "$missing" -eq 0 ]
