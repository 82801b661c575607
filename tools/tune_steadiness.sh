#!/usr/bin/env bash
# How steady the tuner's choices are across processes (docs/tune.md, "Interleaved
# rounds"): runs the `tune_steadiness` example (built with
# `cargo build --release --example tune_steadiness`) in N processes per binary, each
# process with a fresh tuning cache, the binaries taking turns (so that the machine's
# drift falls on each alike), and prints for each binary and shape class how many of
# its processes took the class's most common choice, and each process's tuning time.
#
#   tools/tune_steadiness.sh 12 old/tune_steadiness new/tune_steadiness
#
# Set WGPU_BACKEND and the like as for the GPU tests.
set -euo pipefail
runs=${1:?usage: tune_steadiness.sh N BIN...}
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for i in $(seq 1 "$runs"); do
  b=0
  for bin in "$@"; do
    b=$((b + 1))
    WGALLOC_TUNE_CACHE="$dir/tune-$b-$i.json" "$bin" >"$dir/out-$b-$i.txt" 2>/dev/null
  done
done
b=0
for bin in "$@"; do
  b=$((b + 1))
  echo "== $bin"
  cat "$dir"/out-"$b"-*.txt | awk -v runs="$runs" '
    $1 == "choice" { n[$2 " " $3]++; classes[$2] = 1 }
    $1 == "tune_ms" { ms = ms sprintf(" %.0f", $2); total += $2 }
    END {
      for (c in classes) {
        best = 0; pick = ""; all = ""
        for (k in n) {
          split(k, f, " ")
          if (f[1] == c) {
            all = all sprintf(" %s:%d", f[2], n[k])
            if (n[k] > best) { best = n[k]; pick = f[2] }
          }
        }
        agree += best
        printf "%-24s %2d/%d agree on %-16s (%s )\n", c, best, runs, pick, all
      }
      printf "agreement, all classes: %d/%d\n", agree, runs * length(classes)
      printf "tuning ms per process:%s (mean %.0f)\n", ms, total / runs
    }' | sort
done
