#!/usr/bin/env bash
# Build clonestage and run its main job on a SwiftCompile-shaped input tree: ingest it into a
# fresh cache, stage it three times (first sighting, second sighting, warm), and print what
# each stage used and the cache's counters. Defaults are embedded; override with:
#   DEMO_DIR   where to work (default: a new dir under /var/tmp; use a btrfs/XFS mount to see
#              snapshot/reflink, e.g. /mnt/clonestage-btrfs from .ci/mount-cow.sh)
#   DEMO_FILES input files (default 1978, the p95 SwiftCompile action), DEMO_KIB per file (default 16)
set -euo pipefail
cd "$(dirname "$0")/.."
FILES=${DEMO_FILES:-1978}
KIB=${DEMO_KIB:-16}
cargo build --quiet --release --manifest-path rust/Cargo.toml --bin clonestage
CS=$PWD/rust/target/release/clonestage

WORK=$(mktemp -d "${DEMO_DIR:-/var/tmp}/clonestage-demo.XXXXXX")
trap 'rm -rf "$WORK/root1" "$WORK/root2" "$WORK/root3" 2>/dev/null; chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
export CLONESTAGE_CACHE=$WORK/cache

echo "demo: generating $FILES files of $KIB KiB (an SDK-like tree shared by every action) in $WORK/src"
python3 - "$WORK/src" "$FILES" "$KIB" <<'PY'
import os, sys
root, n, kib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    d = os.path.join(root, "external/sdk/usr/include", "mod%02d" % (i % 40))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%04d.swiftinterface" % i), "wb") as f:
        f.write((b"// %d\n" % i) * (kib * 1024 // 8))
os.makedirs(os.path.join(root, "app/Sources"), exist_ok=True)
open(os.path.join(root, "app/Sources/main.swift"), "w").write("print(1)\n")
PY

DIGEST=$("$CS" ingest "$WORK/src")
echo "demo: input root digest $DIGEST"
for i in 1 2 3; do
    "$CS" stage "$DIGEST" "$WORK/root$i" --output app/out/App.swiftmodule
done
ls -ld "$WORK/root3" "$WORK/root3/app/out" "$WORK/root3/app/Sources" "$WORK/root3/app/Sources/main.swift"
echo
"$CS" stats
