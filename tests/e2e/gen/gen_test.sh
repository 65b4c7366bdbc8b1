#!/bin/bash
# Checks //gen's outputs from the runfiles (cwd: the workspace's runfiles dir).
set -eu
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
[ "$(cat gen/shout.txt)" = "$(printf 'HELLO FROM A SOURCE FILE, STAGED BY CLONESTAGE.\nHELLO FROM A GENRULE')" ] ||
  fail "gen/shout.txt: $(cat gen/shout.txt)"
[ "$(cat gen/greeting.rot13)" = "Uryyb sebz n fbhepr svyr, fgntrq ol pybarfgntr." ] ||
  fail "gen/greeting.rot13: $(cat gen/greeting.rot13)"
[ "$(cat gen/nested/a.txt)" = "hello from a genrule" ] || fail "gen/nested/a.txt"
[ "$(cat gen/nested/deeper/b.txt)" = b ] || fail "gen/nested/deeper/b.txt"
[ "$(cat gen/nested/deeper/still/c.txt)" = c ] || fail "gen/nested/deeper/still/c.txt"
echo "gen outputs ok"
