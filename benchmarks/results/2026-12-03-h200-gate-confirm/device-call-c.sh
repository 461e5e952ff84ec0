#!/usr/bin/env bash
# Mode C: the planted regression's perf run, gate vs run A (another GPU), confirm timed, gate again; few files.
set -u
here=$PWD
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 9
export PYTHONUNBUFFERED=1
w=/tmp/c; mkdir -p $w
nvidia-smi --query-gpu=uuid,name,driver_version --format=csv > $w/gpu.txt; cat $w/gpu.txt
rm -rf /tmp/main; git clone -q -b main .kw-local/repo.bundle /tmp/main || exit 9
git -C /tmp/main fetch -q $here/.kw-local/repo.bundle demo/zero-output:demo/zero-output && git -C /tmp/main checkout -q demo/zero-output || exit 9
cd /tmp/main && export PYTHONPATH=/tmp/site:/tmp/main
rm -f /tmp/kw.db; db=sqlite:////tmp/kw.db
pack() { tar czf $OUT/c.tgz -C /tmp c; }
t0=$SECONDS
timeout 200 python3 -m kernelwatch collect --no-progress --suite perf --match fused_rmsnorm_matmul/ --out $OUT/reg.json.gz 2> $w/reg.log; echo "collect exit $? at $((SECONDS - t0)) s" | tee -a $w/steps.txt
pack
python3 -m kernelwatch ingest --db $db $here/ci/history/*.json.gz $here/.kw-local/full.json.gz > /dev/null
python3 -m kernelwatch gate --db $db --artifact $OUT/reg.json.gz --baseline main --report-dir $w/gate1 > $w/gate1.txt 2>&1; echo "gate exit $? at $((SECONDS - t0)) s" | tee -a $w/steps.txt
pack
s=$SECONDS
timeout 280 python3 -m kernelwatch confirm --db $db --artifact $OUT/reg.json.gz --baseline main --repo /tmp/main --report-file $w/confirm.md > $w/confirm.txt 2>&1; echo "confirm exit $? in $((SECONDS - s)) s (gate included)" | tee -a $w/steps.txt
pack
python3 -m kernelwatch gate --db $db --artifact $OUT/reg.json.gz --baseline main --report-dir $w/gate2 > $w/gate2.txt 2>&1; echo "gate after confirm exit $?" | tee -a $w/steps.txt
python3 - <<'PY' > $w/confirmations.txt
import sqlite3
c = sqlite3.connect("/tmp/kw.db")
cols = [r[1] for r in c.execute("pragma table_info(confirmation)")]
print(cols)
for row in c.execute("select * from confirmation"):
    print(row)
PY
pack; cat $w/steps.txt; head -12 $w/gate2.txt
