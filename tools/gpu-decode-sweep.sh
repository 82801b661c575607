#!/usr/bin/env bash
# The decode step's growth with the context, taken apart on a lent GPU machine: the
# generate bench (GPT-2 small's shape) at prompts across the KV pages' boundaries, with
# the default 16 MiB pages (five for 1,024 tokens: attention takes one dispatch a page
# and layer) and with pages large enough for the whole context (one), each with 16 and
# 256 slices a head. If the step grows by the page and not by the token, the pages'
# dispatches are the cost (docs/kernels.md, "On an NVIDIA H200 a third time").
#
# Here:  tools/gpu-pack.sh generate
# There: source .gpu/env.sh; tools/gpu-decode-sweep.sh > $OUT/sweep.txt
# (about 40 runs of a few seconds each; one shared tuning cache, so only the first tunes).
set -u
bench=${GEN_BENCH:-.gpu/bin/generate}
export WGALLOC_TUNE_CACHE=${WGALLOC_TUNE_CACHE:-$(mktemp -u /tmp/tc-sweep-XXXX.json)}
# The value column of the bench's first table row that starts with $2, from log $1.
cell() { printf '%s\n' "$1" | grep -E "^\| $2" | head -1 | awk -F'|' '{gsub(/ |ms/, "", $3); print $3}'; }
echo "| page bytes | slices | prompt | pages | dispatches | whole step ms | GPU ms |"
echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for pages in $((16 << 20)) $((1 << 30)); do
  for slices in 256 16; do
    for prompt in 16 160 200 240 400 480 640 720 896; do
      log=$(WGALLOC_GEN_PAGE_BYTES=$pages WGALLOC_DECODE_SLICES=$slices \
        WGALLOC_GEN_PREFILL=$prompt WGALLOC_GEN_DECODE=16 timeout 120 "$bench" --bench 2>&1)
      used=$(printf '%s\n' "$log" | grep -o 'used ([0-9]* pages)' | tr -dc '0-9')
      echo "| $pages | $slices | $prompt | ${used:-?} | $(cell "$log" dispatches) | $(cell "$log" 'whole step') | $(cell "$log" 'GPU time') |"
    done
  done
done
