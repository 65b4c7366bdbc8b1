#!/bin/bash
# Checks //gen's outputs from the runfiles (cwd: the workspace's runfiles dir).
set -eu
# tests/lib/report.sh, a data dep from @clonestage_tests_lib (tests/e2e/WORKSPACE).
# shellcheck source=tests/lib/report.sh
source "${TEST_SRCDIR:-..}/clonestage_tests_lib/report.sh"
[ "$(cat gen/shout.txt)" = "$(printf 'HELLO FROM A SOURCE FILE, STAGED BY CLONESTAGE.\nHELLO FROM A GENRULE')" ] ||
  die "gen/shout.txt: $(cat gen/shout.txt)"
[ "$(cat gen/greeting.rot13)" = "Uryyb sebz n fbhepr svyr, fgntrq ol pybarfgntr." ] ||
  die "gen/greeting.rot13: $(cat gen/greeting.rot13)"
[ "$(cat gen/nested/a.txt)" = "hello from a genrule" ] || die "gen/nested/a.txt"
[ "$(cat gen/nested/deeper/b.txt)" = b ] || die "gen/nested/deeper/b.txt"
[ "$(cat gen/nested/deeper/still/c.txt)" = c ] || die "gen/nested/deeper/still/c.txt"
pass "gen outputs ok"
finish
