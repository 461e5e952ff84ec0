#!/usr/bin/env bash
# The GPU runs behind ci/history/: what one call on a lent two-GPU machine runs, with a time limit per step.
#
#   benchmarks/gpu_history.sh full OUT          the whole suite on both GPUs (first, with cold compile caches),
#                                               then on one GPU: the scaling comparison (docs/design.md)
#   benchmarks/gpu_history.sh repeats OUT SECS  perf-only MSELoss + softmax runs repeated on each GPU until SECS
#                                               have passed (real run-to-run noise), and the 20-seed accuracy
#                                               margin on the second GPU first
#   benchmarks/gpu_history.sh launch OUT        the launch paths checked and timed (benchmarks/launch_path.py, off
#                                               then on), the full suite on both GPUs (cold), and perf-only MSELoss
#                                               + softmax runs with the short launch path off, then on
#   benchmarks/gpu_history.sh margin OUT SECS FROM.jsonl
#                                               the 20-seed accuracy margin of every case FROM.jsonl lacks,
#                                               sharded over 4 processes per GPU, stopped after SECS
#
# The machine has no git history: KERNELWATCH_GIT_META names a JSON file with the commit (see
# kernelwatch/collect/metadata.py). Every artifact is written by `kernelwatch collect --out`, never edited.
set -uo pipefail
mode=$1
out=$2
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the benchmarks import the packages of this tree
kw() { python3 -m kernelwatch "$@"; }

collect_logged() {  # NAME LIMIT_S ARGS...: one collect, its stderr (phase table included) kept in NAME.log
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout -s TERM "$limit" python3 -m kernelwatch collect --no-progress --out "$out/$name.json.gz" "$@" \
    2> >(tee "$out/$name.log" >&2)
  echo "== $name: exit $?, $((SECONDS - start)) s"
}

case $mode in
full)
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  collect_logged full-2gpu 250 --devices all
  collect_logged full-1gpu 330 --devices one
  ;;
repeats)
  budget=$3
  mkdir -p "$out/rep"
  repeat_loop() {  # GPU FIRST_INDEX: repeats on one GPU while time is left
    local gpu=$1 i=$2
    while [ $((SECONDS + 75)) -lt "$budget" ]; do
      CUDA_VISIBLE_DEVICES=$gpu timeout -s TERM $((budget - SECONDS)) python3 -m kernelwatch collect --no-progress \
        --kernels mse_loss,scaled_masked_softmax --suite perf --out "$out/rep/repeat-$i.json.gz" 2>"$out/rep/repeat-$i.log"
      echo "== repeat $i on GPU $gpu: exit $? at $SECONDS s"
      i=$((i + 2))
    done
  }
  repeat_loop 0 1 &
  (
    CUDA_VISIBLE_DEVICES=1 timeout -s TERM $((budget / 2)) python3 benchmarks/accuracy_margin.py --device cuda \
      --seeds 20 --jsonl "$out/rep/margin-h200.jsonl" --top 60 >"$out/rep/margin-h200.txt" 2>&1
    echo "== margin: exit $? at $SECONDS s"
    repeat_loop 1 2
  ) &
  wait
  tar -C "$out" -czf "$out/repeats.tgz" rep && rm -rf "$out/rep"
  ;;
launch)
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  for path in off on; do
    flag=$([ $path = off ] && echo 0 || echo 1)
    KERNELWATCH_FAST_LAUNCH=$flag CUDA_VISIBLE_DEVICES=0 timeout 150 python3 benchmarks/launch_path.py \
      --json "$out/launch-$path.json" 2>&1 | tee "$out/launch-$path.log"
    echo "== launch_path $path: exit ${PIPESTATUS[0]} at $SECONDS s"
  done
  python3 benchmarks/launch_path.py --compare "$out/launch-off.json" "$out/launch-on.json" | tee "$out/launch-path.txt"
  collect_logged full-2gpu 280 --devices all
  KERNELWATCH_FAST_LAUNCH=0 collect_logged perf-launch-off 110 --devices all --kernels mse_loss,scaled_masked_softmax \
    --suite perf
  collect_logged perf-launch-on 110 --devices all --kernels mse_loss,scaled_masked_softmax --suite perf
  tar -C "$out" -czf "$out/logs.tgz" --remove-files launch-off.json launch-on.json launch-off.log launch-on.log \
    full-2gpu.log perf-launch-off.log perf-launch-on.log
  ;;
margin)
  budget=$3
  from=$4
  mkdir -p "$out/m"
  for shard in 0 1 2 3 4 5 6 7; do
    cp "$from" "$out/m/margin-$shard.jsonl"
    CUDA_VISIBLE_DEVICES=$((shard % 2)) OMP_NUM_THREADS=4 timeout -s TERM "$budget" python3 benchmarks/accuracy_margin.py \
      --device cuda --seeds 20 --shard "$shard/8" --jsonl "$out/m/margin-$shard.jsonl" >"$out/m/margin-$shard.txt" 2>&1 &
  done
  wait
  echo "== margin shards done at $SECONDS s"
  tar -C "$out" -czf "$out/margin.tgz" m && rm -rf "$out/m"
  ;;
*)
  echo "usage: $0 full|repeats|launch|margin OUT [SECS [FROM.jsonl]]" >&2
  exit 2
  ;;
esac
