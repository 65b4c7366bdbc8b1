#!/usr/bin/env bash
# tests/launcher/run.sh: black-box tests of the launcher: the POSIX shim tools/bazel and the
# real `clonestage launch` behind it (rust/target/release/clonestage), against a stub Bazel
# (tests/launcher/stubs/bazel, which records its arguments) and real `clonestage serve`s.
#
# Each test builds a throwaway workspace with a copy of the shim and runs it with `env -i`
# (only HOME, PATH and what the test sets), then checks the arguments the stub Bazel got,
# the launcher's stderr, the rc file it passed, and the servers on the test's cache (their
# pid is in <cache>/server/lock). Servers are stopped by pid at the end of each test.
#
# Usage: bash tests/launcher/run.sh [TEST...]   (PASS or FAIL per test, with what failed, and
# "N passed, M failed" last: tests/lib/report.sh)
# Needs: a release build of the helper (cargo build --release --bin clonestage), python3
# (a stand-in server that will not stop), Linux's /proc (the server's environment).

set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# LAUNCHER_UNDER_TEST / HELPER_UNDER_TEST: another shim or binary to run the tests against
# (e.g. an older one, to see a new test fail there).
launcher="${LAUNCHER_UNDER_TEST:-$root/tools/bazel}"
helper_bin="${HELPER_UNDER_TEST:-$root/rust/target/release/clonestage}"
stubs="$here/stubs"
# shellcheck source=tests/lib/report.sh
source "$root/tests/lib/report.sh"
[ -x "$helper_bin" ] || die "setup: the helper" "none at $helper_bin (cargo build --release --bin clonestage)"
tmproot="$(mktemp -d "${TMPDIR:-/tmp}/launcher-tests.XXXXXX")"
tmproot="$(cd "$tmproot" && pwd -P)"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/rust/Cargo.toml" | head -n 1)"
T=""

# --- fixtures ---------------------------------------------------------------------

server_pid() { # the pid in CACHE's server lock (default the test's cache), or nothing
  local f="${1:-$T/cache}/server/lock" pid=""
  [ -f "$f" ] && read -r pid <"$f"
  echo "$pid"
}
stop_servers() { # stop every server on the test's caches, by the pid each lock names
  local c pid
  [ -n "$T" ] || return 0
  for c in "$T/cache" "$T/xdg/clonestage" "$T/home/.cache/clonestage" $(cat "$T/extra-caches" 2>/dev/null); do
    pid="$(server_pid "$c")"
    [ -n "$pid" ] && kill "$pid" 2>/dev/null
  done
  for pid in $(cat "$T/extra-pids" 2>/dev/null); do kill -9 "$pid" 2>/dev/null; done
  for c in "$T/cache" "$T/xdg/clonestage" "$T/home/.cache/clonestage"; do
    pid="$(server_pid "$c")"
    [ -n "$pid" ] && wait_gone "$pid"
  done
  return 0
}
wait_gone() { # wait up to 10 s for pid $1 to end, then SIGKILL it
  local i
  for i in $(seq 1 100); do
    kill -0 "$1" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -9 "$1" 2>/dev/null
}
trap 'stop_servers; rm -rf "$tmproot"' EXIT

link_helper() { # link_helper DEST: the helper under test at DEST, a stand-in spawn wrapper beside it
  mkdir -p "$(dirname "$1")"
  ln -f "$helper_bin" "$1" 2>/dev/null || cp "$helper_bin" "$1"
  # `serve` looks for clonestage-spawn beside itself; these tests run no action.
  printf '#!/bin/sh\nexit 0\n' >"$(dirname "$1")/clonestage-spawn"
  chmod +x "$(dirname "$1")/clonestage-spawn"
}

setup() { # a workspace with the shim, stub bazel named bazel-7.4.1, the helper on PATH
  T="$(mktemp -d "$tmproot/t.XXXXXX")"
  mkdir -p "$T/ws/tools" "$T/bin" "$T/cache" "$T/home"
  cp "$launcher" "$T/ws/tools/bazel"
  : >"$T/ws/WORKSPACE"
  cp "$stubs/bazel" "$T/bin/bazel-7.4.1"
  link_helper "$T/bin/clonestage"
  REAL="$T/bin/bazel-7.4.1"
  SYS_PATH="/usr/local/bin:/usr/bin:/bin"
  EXTRA_ENV=()
}

# launch [ARGS...]: run the shim in $T/ws; sets RC, ERR (stderr), and $T/bazel-args.
launch() {
  rm -f "$T/bazel-args"
  (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" \
    CLONESTAGE_CACHE="$T/cache" BAZEL_REAL="$REAL" STUB_BAZEL_OUT="$T/bazel-args" \
    "${EXTRA_ENV[@]}" "$T/ws/tools/bazel" "$@") >"$T/stdout" 2>"$T/stderr"
  RC=$?
  ERR="$(cat "$T/stderr")"
}

start_server() { # a server up before the launcher runs, on CACHE (default the test's); env: VAR=value...
  local cache="$T/cache"
  (cd / && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" NO_COLOR=1 "$@" \
    "$T/bin/clonestage" --cache "$cache" serve </dev/null >>"$T/outside-serve.log" 2>&1 &)
  wait_ready "$cache"
}
wait_ready() { # until a server answers on cache $1
  local i
  for i in $(seq 1 200); do
    "$helper_bin" --cache "$1" address >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "    (no server became ready on $1)"
  return 1
}

# --- assertions -------------------------------------------------------------------

FAILS=()
check() { # check DESCRIPTION COMMAND...: record a failure unless COMMAND succeeds
  local what="$1"
  shift
  if ! "$@"; then FAILS+=("$what"); fi
}
# args_are WORD...: the stub Bazel got exactly these arguments; @RC stands for the launcher's
# own --bazelrc=<cache>/launcher/bazelrc/<name> (an existing file).
args_are() {
  local got=() i
  [ -f "$T/bazel-args" ] || return 1
  if [ $# -eq 0 ]; then
    [ -z "$(cat "$T/bazel-args")" ]
    return
  fi
  mapfile -t got <"$T/bazel-args"
  [ "${#got[@]}" = "$#" ] || return 1
  for ((i = 0; i < $#; i++)); do
    local want="${*:$((i + 1)):1}"
    if [ "$want" = @RC ]; then
      case "${got[$i]}" in
        --bazelrc="$T"/cache/launcher/bazelrc/*.bazelrc) [ -f "${got[$i]#--bazelrc=}" ] || return 1 ;;
        *) return 1 ;;
      esac
    elif [ "${got[$i]}" != "$want" ]; then
      return 1
    fi
  done
}
our_rc() { # the path of the launcher's rc file Bazel got
  sed -n 's/^--bazelrc=\(.*\/launcher\/bazelrc\/.*\)$/\1/p' "$T/bazel-args" 2>/dev/null | head -n 1
}
executor_of_rc() { grep -v '^#' "$(our_rc)" 2>/dev/null | head -n 1; }
rc_is_unix() { [ "$(executor_of_rc)" = "build --remote_executor=unix:$(cd "$T/cache" && pwd -P)/server/clonestage.sock" ]; }
rc_is_tcp() { [ "$(executor_of_rc)" = "try-import $(cd "$T/cache" && pwd -P)/server/tcp.bazelrc" ]; }
stderr_has() { [[ "$ERR" == *"$1"* ]]; }
stderr_lacks() { [[ "$ERR" != *"$1"* ]]; }
stderr_empty() { [ -z "$ERR" ]; }
stderr_lines() { if [ -z "$ERR" ]; then echo 0; else printf '%s\n' "$ERR" | wc -l | tr -d ' '; fi; }
equals() { [ "$1" = "$2" ]; }
less_than() { [ "$1" -lt "$2" ]; }
no_file() { ! [ -e "$1" ]; }
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
mode_of() { stat -c %a "$1" 2>/dev/null || stat -f %Lp "$1"; }
serve_env() { # the CLONESTAGE_UPSTREAM* variables of the running server, one per line
  local pid
  pid="$(server_pid)"
  [ -n "$pid" ] && tr '\0' '\n' <"/proc/$pid/environ" | grep '^CLONESTAGE_UPSTREAM' | sort
}
serve_env_is() { # the running server got exactly these CLONESTAGE_UPSTREAM* variables
  local expected=""
  [ $# -eq 0 ] || expected="$(printf '%s\n' "$@" | sort)"
  [ "$(serve_env)" = "$expected" ]
}

run_test() {
  local name="$1"
  FAILS=()
  declare -F "$name" >/dev/null || { fail "$name" "no such test in cases.sh or upstream_tests.sh"; return; }
  setup
  "$name"
  stop_servers
  if [ "${#FAILS[@]}" -eq 0 ]; then
    pass "$name"
  else
    # What failed, then what the launcher said, what Bazel got and the server's last words.
    fail "$name" "${FAILS[@]/#/- }" "stderr:" "$(printf '%s\n' "$ERR" | head -n 20 | sed 's/^/      | /')" \
      "bazel args:" "$(tail_of "$T/bazel-args" 40)" "serve.log:" "$(tail_of "$T/cache/launcher/serve.log" 5)"
  fi
}

# shellcheck source=tests/launcher/cases.sh
source "$here/cases.sh"
# shellcheck source=tests/launcher/upstream_tests.sh
source "$here/upstream_tests.sh"

tests=(
  test_non_build_commands_pass_through
  test_fast_path_passes_the_rc_before_the_command
  test_tcp_for_bazel_4_and_5
  test_tcp_choice_from_env_bazelversion_and_version_query
  test_the_rc_holds_the_settings_for_that_bazel
  test_tcp_token_travels_in_an_rc_file_not_argv
  test_tcp_keeps_bazels_output_root_private
  test_startup_options_before_command
  test_arguments_kept_verbatim
  test_exit_status_is_bazels
  test_starts_server_when_down_and_detaches_it
  test_a_cache_dir_the_launcher_creates_is_private
  test_command_substitution_does_not_wait_for_server
  test_restart_after_server_died
  test_a_log_without_an_exit_line_means_the_server_died
  test_race_two_launches_start_one_server
  test_race_without_lock_tools_still_one_server
  test_helper_fails_to_start
  test_helper_never_ready_times_out
  test_no_helper_and_no_cargo
  test_bad_clonestage_bin
  test_clonestage_bin_and_workspace_binary_are_used
  test_checkout_installs_both_binaries_once
  test_users_own_rust_manifest_is_never_built
  test_install_failure_does_not_block_bazel
  test_per_version_home_comes_first
  test_self_install_puts_the_helper_where_the_shim_looks
  test_server_of_another_version_is_restarted_with_ours
  test_a_server_of_another_version_that_will_not_stop
  test_digest_function_other_than_sha256_stands_aside
  test_ignore_all_rc_files_stands_aside
  test_symlinked_launcher_finds_its_checkout
  test_explicit_executor_wins
  test_disable
  test_finds_real_bazel_on_path_without_looping
  test_wrapper_reentry_adds_flags_once
  test_xdg_cache_home_is_the_cache_of_status_and_launcher
  test_the_shim_is_posix_sh
  test_upstream_env_reaches_serve
  test_upstream_config_file_outside_the_workspace
  test_upstream_auth_file_inside_the_workspace_is_refused
  test_running_server_with_another_upstream_is_kept_and_named_once
  test_server_started_elsewhere_with_unknown_upstream_is_named_once
)
if [ $# -gt 0 ]; then tests=("$@"); fi
for t in "${tests[@]}"; do
  run_test "$t"
done
finish
