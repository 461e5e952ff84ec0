#!/usr/bin/env bash
# One device call of session 11. Mode A: launch spread, full cold collect of main (peers), gate vs the committed
# history, confirm, gate again. Mode B: launch spread, perf run of the planted regression (demo/zero-output),
# gate vs run A (another GPU), confirm (timed), gate again.
set -u
mode=$1
here=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=uuid,name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu-$mode.txt
cat $OUT/gpu-$mode.txt
rm -rf /tmp/main; git clone -q -b main .kw-local/repo.bundle /tmp/main || exit 9
git -C /tmp/main fetch -q $here/.kw-local/repo.bundle demo/zero-output:demo/zero-output || exit 9
db=sqlite:////tmp/kw.db
t0=$SECONDS
step() { echo "== $1: $((SECONDS - t0)) s"; }
if [ "$mode" = A ]; then
  cd /tmp/main && export PYTHONPATH=/tmp/site:/tmp/main
  python3 benchmarks/launch_spread.py --out $OUT/launch-A.json 2>&1 | tee $OUT/launch-A.txt; step launch
  timeout 330 python3 -m kernelwatch collect --no-progress --out $OUT/full.json.gz 2> >(tee $OUT/full.log >&2); echo "collect exit $?"; step collect
  python3 -m kernelwatch ingest --db $db $here/ci/history/*.json.gz > /dev/null; step ingest
  python3 -m kernelwatch gate --db $db --artifact $OUT/full.json.gz --baseline main --report-dir $OUT/gate1 > $OUT/gate1.txt 2>&1; echo "gate exit $?"; head -40 $OUT/gate1.txt; step gate
  python3 -m kernelwatch confirm --db $db --artifact $OUT/full.json.gz --baseline main --repo /tmp/main --dry-run
  timeout 150 python3 -m kernelwatch confirm --db $db --artifact $OUT/full.json.gz --baseline main --repo /tmp/main --report-file $OUT/confirm.md > $OUT/confirm.txt 2>&1; echo "confirm exit $?"; cat $OUT/confirm.txt | head -40; step confirm
  python3 -m kernelwatch gate --db $db --artifact $OUT/full.json.gz --baseline main --report-dir $OUT/gate2 > $OUT/gate2.txt 2>&1; echo "gate after confirm exit $?"; head -30 $OUT/gate2.txt; step gate2
else
  git -C /tmp/main checkout -q demo/zero-output || exit 9
  cd /tmp/main && export PYTHONPATH=/tmp/site:/tmp/main
  python3 benchmarks/launch_spread.py --out $OUT/launch-B.json 2>&1 | tee $OUT/launch-B.txt; step launch
  timeout 200 python3 -m kernelwatch collect --no-progress --suite perf --match fused_rmsnorm_matmul/ --out $OUT/reg.json.gz 2> >(tee $OUT/reg.log >&2); echo "collect exit $?"; step collect
  python3 -m kernelwatch ingest --db $db $here/ci/history/*.json.gz $here/.kw-local/full.json.gz > /dev/null; step ingest
  python3 -m kernelwatch gate --db $db --artifact $OUT/reg.json.gz --baseline main --report-dir $OUT/gate1 > $OUT/gate1.txt 2>&1; echo "gate exit $?"; head -50 $OUT/gate1.txt; step gate
  python3 -m kernelwatch confirm --db $db --artifact $OUT/reg.json.gz --baseline main --repo /tmp/main --dry-run
  timeout 200 python3 -m kernelwatch confirm --db $db --artifact $OUT/reg.json.gz --baseline main --repo /tmp/main --report-file $OUT/confirm.md > $OUT/confirm.txt 2>&1; echo "confirm exit $?"; cat $OUT/confirm.txt | head -40; step confirm
  python3 -m kernelwatch gate --db $db --artifact $OUT/reg.json.gz --baseline main --report-dir $OUT/gate2 > $OUT/gate2.txt 2>&1; echo "gate after confirm exit $?"; head -40 $OUT/gate2.txt; step gate2
  timeout 100 python3 -m kernelwatch collect --no-progress --suite perf --match mse_loss/ --out $OUT/mse.json.gz 2> >(tee $OUT/mse.log >&2); echo "collect exit $?"; step mse
fi
