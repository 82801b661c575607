#!/usr/bin/env bash
# Packs executables for a run on a lent GPU machine (../shared/gpu/README.md) into
# .gpu/ at the project root: the Vulkan loader packages and ONE xz archive of the
# stripped executables whose names match the patterns. The archive's dictionary holds
# every binary, so the code they share (wgpu, naga, the crate) is stored once: 22-23
# executables of 22-34 MB each took 36-40 MB, where compressed one by one about 14 fit
# the 64 MiB a call carries.
#
# Usage, from the project root:
#   tools/gpu-pack.sh [PATTERN ...]    default: 'gpu_' 'cli_' 'gen_' 'forward' 'generate'
# A pattern matches the start of a test's, bench's or binary's name (`gpu_kv` takes
# gpu_kv_attention and gpu_kv_f16; examples are never packed); the `wgalloc` binary
# always goes. A pattern that starts `wgalloc-burn-side` (the side-by-side beside burn)
# also builds that workspace package. Executables in the folder named by
# GPU_PACK_EXTRA (another commit's benches, say, for a before/after in one call) go
# into the archive as they are named there. GPU_PACK_CARGO_ARGS is added to the build
# (`--no-default-features --features cli` leaves tract out: built at opt-level 0, it is
# most of each test binary). Then call the device tool with
# carry [".gpu"] and a command that begins with `source .gpu/env.sh;`, which unpacks
# the archive into .gpu/bin/ (benches as .gpu/bin/forward, .gpu/bin/generate), links
# /work/main to the tree (paths compiled in with CARGO_MANIFEST_DIR) and sets
# WGALLOC_REQUIRE_GPU=1 and WGPU_BACKEND=vulkan.
# Packing takes a few minutes on two cores (xz, one thread, about 10 GB of memory).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
debs=${GPU_DEBS:-../shared/gpu/debs}
[ "$#" -gt 0 ] || set -- gpu_ cli_ gen_ forward generate
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin"
cargo build --release --all-targets ${GPU_PACK_CARGO_ARGS:-} --message-format=json 2>/dev/null \
  | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    kinds = m.get("target", {}).get("kind", [])
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "example" not in kinds:
        print(m["executable"])' | sort -u > "$stage/all"
for p in "$@"; do
  case wgalloc-burn-side in "$p"*)
    cargo build --release --locked -p wgalloc-burn-side --message-format=json 2>/dev/null \
      | python3 -c '
import json, sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable"):
        print(m["executable"])' >> "$stage/all"
    break ;;
  esac
done
while read -r exe; do
  name=$(basename "$exe")
  keep=no
  [ "$name" = wgalloc ] && keep=yes
  for p in "$@"; do
    case "$name" in "$p"*) keep=yes ;; esac
  done
  [ "$keep" = yes ] && cp "$exe" "$stage/bin/" && strip "$stage/bin/$name"
done < "$stage/all"
if [ -n "${GPU_PACK_EXTRA:-}" ]; then
  for exe in "$GPU_PACK_EXTRA"/*; do
    cp "$exe" "$stage/bin/" && strip "$stage/bin/$(basename "$exe")"
  done
fi
rm -rf .gpu && mkdir -p .gpu/debs
cp "$debs"/*.deb .gpu/debs/
(cd "$stage" && tar cf - bin | xz -T1 -6 --lzma2=dict=1536MiB -M 20GiB) > .gpu/bins.tar.xz
cat > .gpu/env.sh <<'EOF'
for f in .gpu/debs/*.deb; do dpkg -x "$f" /; done; ldconfig
export XDG_RUNTIME_DIR=$(mktemp -d) WGALLOC_REQUIRE_GPU=1 RUST_BACKTRACE=1 WGPU_BACKEND=vulkan
mkdir -p /work; [ "$PWD" = /work/main ] || ln -sfn "$PWD" /work/main
xz -dc .gpu/bins.tar.xz | tar xf - -C .gpu
mkdir -p target/release && cp .gpu/bin/wgalloc target/release/wgalloc
for x in forward generate; do
  f=$(ls .gpu/bin/"$x"-* 2>/dev/null | head -1); [ -n "$f" ] && mv "$f" .gpu/bin/"$x"
done
true
EOF
echo "packed $(ls "$stage/bin" | wc -l) executables:"; ls "$stage/bin"
du -sh .gpu
echo 'carry: [".gpu"]   command prefix: source .gpu/env.sh;'
