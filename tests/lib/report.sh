# shellcheck shell=bash
# tests/lib/report.sh: the one reporting harness of the shell suites (issue 27, "One harness").
# Sourced by every tests/*/run.sh and the suites' own test scripts (tests/e2e's sh_tests get
# it as a data dep through @clonestage_tests_lib). Works under `set -e` and `set -u`.
#
#   pass NAME              counts a pass, prints "PASS: NAME"
#   fail NAME [DETAIL...]  counts a failure, prints "FAIL: NAME" and each DETAIL's lines indented
#                          (a DETAIL may be tail_of's output)
#   skip NAME WHY          counts a check that could not run here, prints "SKIP: NAME: WHY"
#   pass_if NAME CMD...    pass NAME when CMD succeeds, else fail NAME
#   die NAME [DETAIL...]   fail, the summary line, exit 1: for scripts that stop at the first
#   finish [NOTE]          prints "N passed, M failed[, K skipped][ NOTE]"; its status is 1 on
#                          any failure, so a suite's last line `finish` is its exit status
#   say TEXT...            one line on stdout
#   tail_of LOG [N]        LOG's last N lines ($tail_lines, default 15), indented, for details
#
# Set report_elapsed=1 to follow each PASS/FAIL name with the script's seconds so far
# (" [42s]"). The counters are $passed, $failed and $skipped. A suite's own cleanup belongs in
# its EXIT trap.

passed=0
failed=0
skipped=0
: "${report_elapsed:=0}"
: "${tail_lines:=15}"

say() { printf '%s\n' "$*"; }

_report_when() { [ "$report_elapsed" = 1 ] && printf ' [%ss]' "$SECONDS"; return 0; }

pass() { # pass NAME
  passed=$((passed + 1))
  say "PASS: $1$(_report_when)"
}

fail() { # fail NAME [DETAIL...]
  failed=$((failed + 1))
  say "FAIL: $1$(_report_when)"
  shift
  local detail line
  for detail in "$@"; do # each line indented once; tail_of's lines already are
    while IFS= read -r line; do
      case "$line" in "      "*) say "$line" ;; *) say "      $line" ;; esac
    done <<<"$detail"
  done
}

skip() { # skip NAME WHY
  skipped=$((skipped + 1))
  say "SKIP: $1: $2"
}

pass_if() { # pass_if NAME CMD...
  local name=$1
  shift
  if "$@"; then pass "$name"; else fail "$name"; fi
}

die() { # die NAME [DETAIL...]
  fail "$@"
  finish ""
  exit 1
}

finish() { # finish [NOTE]
  local skips=
  [ "$skipped" = 0 ] || skips=", $skipped skipped"
  say "$passed passed, $failed failed$skips${1:+ $1}"
  [ "$failed" = 0 ]
}

tail_of() { # tail_of LOG [N]
  tail -n "${2:-$tail_lines}" "$1" 2>/dev/null | sed 's/^/      | /'
}
