#!/bin/bash
# Checks //mixed's outputs from the runfiles (cwd: the workspace's runfiles dir).
set -eu
# tests/lib/report.sh, a data dep from @clonestage_tests_lib (tests/e2e/WORKSPACE).
# shellcheck source=tests/lib/report.sh
source "${TEST_SRCDIR:-..}/clonestage_tests_lib/report.sh"
[ "$(cat mixed/second.txt)" = "$(printf 'first\nsecond')" ] || die "mixed/second.txt: $(cat mixed/second.txt)"
[ "$(cat mixed/sub/third.txt)" = "$(printf 'first\nthird')" ] || die "mixed/sub/third.txt"
expected="$(printf '%s\n' . ./copy1.txt ./copy2.txt ./copy3.txt ./sub ./sub/count.txt ./sub/deeper ./sub/deeper/empty.txt ./sub/link-to-copy1 \
  first first second '3 input(s)' first)"
[ "$(cat mixed/tree_listing.txt)" = "$expected" ] || die "mixed/tree_listing.txt:
$(cat mixed/tree_listing.txt)
expected:
$expected"
pass "mixed outputs ok"
finish
