# shellcheck shell=bash
# tests/lib/bazel.sh: reading a Bazel log, for the suites that drive Bazel (e2e, teamrc,
# consumer). Bazel 4.2.3 ends a build with its process summary, e.g.
# "INFO: 49 processes: 20 internal, 29 remote."
#
#   summary_of LOG         that line (the last one in LOG), or nothing
#   spawns LOG KIND        how many spawns of KIND ("remote", "remote cache hit", "local", ...)
#   other_spawns LOG       the kinds other than internal, remote and remote cache hit (a hit is
#                          served by clonestage's action cache), comma-separated; empty when none

summary_of() { grep -E '^INFO: [0-9,]+ process(es)?: ' "$1" | tail -n 1; }

spawns() { # spawns LOG KIND
  local n
  n="$(summary_of "$1" | grep -oE "[0-9,]+ $2[,.]" | head -n 1 | tr -dc 0-9)"
  echo "${n:-0}"
}

other_spawns() { # other_spawns LOG
  summary_of "$1" | sed -E 's/^INFO: [0-9,]+ process(es)?: //; s/\.$//' | tr ',' '\n' |
    sed -E 's/^ *//' | grep -vE '^[0-9,]+ (internal|remote|remote cache hit)$' | tr '\n' ',' | sed 's/,$//'
}
