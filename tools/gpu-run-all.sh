#!/usr/bin/env bash
# Every GPU test executable, the default run and (time allowing) the decode sweep, in
# one call on a lent GPU machine (../shared/gpu/README.md), each test executable's
# summary line and time in $OUT/tests.txt, a failing one's whole log in
# $OUT/fail-NAME.log, `wgalloc info` in $OUT/info.txt, the default run in
# $OUT/default_run.txt and the sweep in $OUT/sweep.txt.
#
# Here (about 6.5 minutes on two cores; gpu_every_plan_runs needs the default
# features, to import the shipped ONNX files, so it is built apart and packed as
# gpu_every_plan_runs_onnx; the rest without tract, which is most of each binary):
#   mkdir -p /tmp/gpu-extra && cp "$(cargo test --release --locked --test gpu_every_plan_runs \
#     --no-run --message-format=json | python3 -c 'import json,sys
#   for l in sys.stdin:
#       m = json.loads(l)
#       if "gpu_every_plan_runs" in (m.get("executable") or ""): print(m["executable"])')" \
#     /tmp/gpu-extra/gpu_every_plan_runs_onnx
#   GPU_PACK_EXTRA=/tmp/gpu-extra GPU_PACK_CARGO_ARGS="--locked --no-default-features --features cli" \
#     tools/gpu-pack.sh gpu_ cli_ gen_ forward generate
# There (device tool, carry [".gpu"], timeout_s about 560):
#   bash tools/gpu-run-all.sh
# The sweep starts only where the tests and the default run ended within
# GPU_RUN_SWEEP_BEFORE seconds (330), and stops at GPU_RUN_UNTIL seconds (520).
set -u
start=$(date +%s)
elapsed() { echo $(( $(date +%s) - start )); }
out=${OUT:-/tmp/gpu-run-all}
mkdir -p "$out"
source .gpu/env.sh
mkdir -p target/tmp
export WGALLOC_TUNE_CACHE=$PWD/target/tmp/tune.json
rm -f target/tmp/capability-skips.log
{ command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$out/tests.txt" 2>&1
.gpu/bin/wgalloc info > "$out/info.txt" 2>&1
for t in .gpu/bin/gpu_* .gpu/bin/cli_* .gpu/bin/gen_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  # Packed without tract, this one fails on the first ONNX file: its _onnx build runs.
  case $name in gpu_every_plan_runs-*) [ -x .gpu/bin/gpu_every_plan_runs_onnx ] && continue ;; esac
  began=$(date +%s%N)
  timeout 240 "$t" --test-threads=1 > /tmp/gpu-run-all.log 2>&1
  rc=$?
  took=$(( ($(date +%s%N) - began) / 1000000 ))
  echo "$name rc=$rc $(grep -E '^test result' /tmp/gpu-run-all.log | tail -1) ${took}ms" >> "$out/tests.txt"
  [ "$rc" -eq 0 ] || cp /tmp/gpu-run-all.log "$out/fail-$name.log"
done
echo "capability skips: $(cat target/tmp/capability-skips.log 2>/dev/null | wc -l)" >> "$out/tests.txt"
cat target/tmp/capability-skips.log >> "$out/tests.txt" 2>/dev/null
echo "tests done at $(elapsed) s" >> "$out/tests.txt"
timeout 150 .gpu/bin/wgalloc > "$out/default_run.txt" 2>&1
echo "default run rc=$? at $(elapsed) s" >> "$out/tests.txt"
cat "$out/tests.txt"
if [ "$(elapsed)" -lt "${GPU_RUN_SWEEP_BEFORE:-330}" ] && [ -x .gpu/bin/generate ]; then
  timeout $(( ${GPU_RUN_UNTIL:-520} - $(elapsed) )) tools/gpu-decode-sweep.sh > "$out/sweep.txt" 2>&1
  echo "sweep rc=$? at $(elapsed) s"
  cat "$out/sweep.txt"
fi
