#!/bin/bash
# Checks the big blobs' sizes and checksums against freshly generated copies
# (cwd: the workspace's runfiles dir).
set -eu
size=25165824
expected="$(
  yes 'clonestage e2e output blob' | head -c "$size" | wc -c
  yes 'clonestage e2e output blob' | head -c "$size" | cksum
  yes 'clonestage e2e source blob' | head -c "$size" | wc -c
  yes 'clonestage e2e source blob' | head -c "$size" | cksum
)"
if [ "$(cat big/sums.txt)" != "$expected" ]; then
  echo "FAIL: big/sums.txt:" >&2
  cat big/sums.txt >&2
  echo "expected:" >&2
  echo "$expected" >&2
  exit 1
fi
[ "$(cksum <big/generated.bin)" = "$(sed -n 2p big/sums.txt)" ] || {
  echo "FAIL: big/generated.bin differs from what :sums read" >&2
  exit 1
}
echo "big blobs ok"
