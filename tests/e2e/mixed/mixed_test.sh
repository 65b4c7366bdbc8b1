#!/bin/bash
# Checks //mixed's outputs from the runfiles (cwd: the workspace's runfiles dir).
set -eu
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
[ "$(cat mixed/second.txt)" = "$(printf 'first\nsecond')" ] || fail "mixed/second.txt: $(cat mixed/second.txt)"
[ "$(cat mixed/sub/third.txt)" = "$(printf 'first\nthird')" ] || fail "mixed/sub/third.txt"
expected="$(printf '%s\n' . ./copy1.txt ./copy2.txt ./copy3.txt ./sub ./sub/count.txt ./sub/deeper ./sub/deeper/empty.txt ./sub/link-to-copy1 \
  first first second '3 input(s)' first)"
[ "$(cat mixed/tree_listing.txt)" = "$expected" ] || fail "mixed/tree_listing.txt:
$(cat mixed/tree_listing.txt)
expected:
$expected"
echo "mixed outputs ok"
