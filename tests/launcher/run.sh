#!/usr/bin/env bash
# tests/launcher/run.sh: black-box tests of tools/bazel, the launcher, against
# stub `clonestage`, `bazel` and `cargo` scripts (tests/launcher/stubs/).
#
# Each test builds a throwaway workspace with a copy of the launcher and runs it
# with `env -i` (only HOME, PATH and what the test sets), then checks the
# arguments the stub Bazel received, the launcher's stderr, and how many stub
# servers were started. Stub servers are stopped by the pid they recorded.
#
# Usage: bash tests/launcher/run.sh    (prints "N passed, M failed" last)
# Needs: bash >= 4 (EPOCHREALTIME for the timing test uses bash 5, else skipped).

set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# LAUNCHER_UNDER_TEST: another launcher to run these tests against (e.g. an older one, to
# see a new test fail there).
launcher="${LAUNCHER_UNDER_TEST:-$root/tools/bazel}"
stubs="$here/stubs"
tmproot="$(mktemp -d "${TMPDIR:-/tmp}/launcher-tests.XXXXXX")"
passed=0
failed=0
T=""

cleanup_servers() { # stop every stub server the current test started, by pid
  local f pid
  [ -n "$T" ] || return 0
  for f in "$T/cache/stub-serve-starts" "$T/extra-pids"; do
    [ -f "$f" ] || continue
    while read -r pid; do
      [ -n "$pid" ] && kill "$pid" 2>/dev/null
    done <"$f"
  done
  return 0
}
trap 'cleanup_servers; rm -rf "$tmproot"' EXIT

# --- fixtures ---------------------------------------------------------------------

setup() { # a workspace with the launcher, stub bazel named bazel-7.4.1, stub helper on PATH
  T="$(mktemp -d "$tmproot/t.XXXXXX")"
  mkdir -p "$T/ws/tools" "$T/bin" "$T/cache" "$T/home"
  cp "$launcher" "$T/ws/tools/bazel"
  : >"$T/ws/WORKSPACE"
  cp "$stubs/bazel" "$T/bin/bazel-7.4.1"
  cp "$stubs/clonestage" "$T/bin/clonestage"
  REAL="$T/bin/bazel-7.4.1"
  SYS_PATH="/usr/local/bin:/usr/bin:/bin"
  EXTRA_ENV=()
}

# launch [ARGS...]: run the launcher in $T/ws; sets RC, ERR (stderr), ARGS_OUT file, ELAPSED_MS.
launch() {
  local start end
  start="$(now_ms)"
  (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" \
    CLONESTAGE_CACHE="$T/cache" BAZEL_REAL="$REAL" STUB_BAZEL_OUT="$T/bazel-args" \
    "${EXTRA_ENV[@]}" "$T/ws/tools/bazel" "$@") >"$T/stdout" 2>"$T/stderr"
  RC=$?
  end="$(now_ms)"
  ELAPSED_MS=$((end - start))
  ERR="$(cat "$T/stderr")"
}

now_ms() {
  if [ -n "${EPOCHREALTIME:-}" ]; then
    local t="${EPOCHREALTIME/[.,]/}"
    echo $((t / 1000))
  else
    echo $(($(date +%s) * 1000))
  fi
}

start_server() { # a stub server that is up before the launcher runs; args: extra env (VAR=value)
  (/usr/bin/env -i HOME="$T/home" PATH="$SYS_PATH" "$@" "$T/bin/clonestage" --cache "$T/cache" serve \
    </dev/null >/dev/null 2>&1 &)
  wait_for_file "$T/cache/server/tcp-port"
}

wait_for_file() {
  local i
  for i in $(seq 1 100); do
    [ -f "$1" ] && return 0
    sleep 0.05
  done
  return 1
}

count_lines() { # lines in a file, 0 if missing
  if [ -f "$1" ]; then wc -l <"$1" | tr -d ' '; else echo 0; fi
}

live_servers() {
  local n=0 pid
  if [ -f "$T/cache/stub-serve-starts" ]; then
    while read -r pid; do
      kill -0 "$pid" 2>/dev/null && n=$((n + 1))
    done <"$T/cache/stub-serve-starts"
  fi
  echo "$n"
}

# --- assertions -------------------------------------------------------------------

FAILS=()
check() { # check DESCRIPTION COMMAND...: record a failure unless COMMAND succeeds
  local what="$1"
  shift
  if ! "$@"; then FAILS+=("$what"); fi
}
args_are() { # the stub Bazel got exactly these arguments
  local expected
  expected="$(printf '%s\n' "$@")"
  [ -f "$T/bazel-args" ] && [ "$(cat "$T/bazel-args")" = "$expected" ]
}
stderr_has() { [[ "$ERR" == *"$1"* ]]; }
stderr_empty() { [ -z "$ERR" ]; }
equals() { [ "$1" = "$2" ]; }
less_than() { [ "$1" -lt "$2" ]; }
no_file() { ! [ -e "$1" ]; }

UNIX_FLAG=""
TCP_RC=""
flags_for() { # what the launcher adds for this test's cache: unix flag, TCP startup option
  UNIX_FLAG="--remote_executor=unix://$T/cache/server/clonestage.sock"
  TCP_RC="--bazelrc=$T/cache/launcher/tcp.bazelrc"
}

run_test() {
  local name="$1"
  FAILS=()
  setup
  flags_for
  "$name"
  cleanup_servers
  if [ "${#FAILS[@]}" -eq 0 ]; then
    passed=$((passed + 1))
    echo "PASS $name"
  else
    failed=$((failed + 1))
    echo "FAIL $name"
    local f
    for f in "${FAILS[@]}"; do echo "    - $f"; done
    echo "    stderr: $ERR" | head -20
    [ -f "$T/bazel-args" ] && sed 's/^/    bazel arg: /' "$T/bazel-args"
  fi
}

# --- tests ------------------------------------------------------------------------

test_non_build_commands_pass_through() {
  local cmd
  for cmd in version query help info shutdown clean fetch; do
    launch "$cmd" //x
    check "$cmd: arguments unchanged" args_are "$cmd" //x
  done
  launch --version
  check "--version passes through" equals "$(cat "$T/stdout")" "bazel 7.4.1"
  launch
  check "no arguments pass through" args_are
  check "no server started for them" no_file "$T/cache/stub-serve-starts"
  check "no helper asked for them" no_file "$T/cache/stub-address-calls"
}

test_fast_path_inserts_unix_flags_after_command() {
  start_server
  launch build //foo:bar --jobs=2
  check "exit 0" equals "$RC" 0
  check "flags right after the command word" args_are build "$UNIX_FLAG" //foo:bar --jobs=2
  check "no new server" equals "$(count_lines "$T/cache/stub-serve-starts")" 1
  check "one address call" equals "$(count_lines "$T/cache/stub-address-calls")" 1
  check "quiet" stderr_empty
  local cmd
  for cmd in test run coverage cquery aquery mobile-install; do
    launch "$cmd" //t
    check "$cmd gets the flags" args_are "$cmd" "$UNIX_FLAG" //t
  done
}

test_tcp_for_bazel_4_and_5() {
  start_server
  cp "$stubs/bazel" "$T/bin/bazel-4"
  REAL="$T/bin/bazel-4"
  launch build //x
  check "bazel-4 (Debian) gets TCP (token in an rc file)" args_are "$TCP_RC" build //x
  mkdir -p "$T/bazelisk/downloads/bazelbuild/bazel-5.4.1-linux-x86_64/bin"
  cp "$stubs/bazel" "$T/bazelisk/downloads/bazelbuild/bazel-5.4.1-linux-x86_64/bin/bazel"
  REAL="$T/bazelisk/downloads/bazelbuild/bazel-5.4.1-linux-x86_64/bin/bazel"
  launch build //x
  check "Bazelisk's 5.4.1 gets TCP" args_are "$TCP_RC" build //x
  mkdir -p "$T/bazelisk/downloads/bazelbuild/bazel-8.1.0-linux-x86_64/bin"
  cp "$stubs/bazel" "$T/bazelisk/downloads/bazelbuild/bazel-8.1.0-linux-x86_64/bin/bazel"
  REAL="$T/bazelisk/downloads/bazelbuild/bazel-8.1.0-linux-x86_64/bin/bazel"
  launch build //x
  check "Bazelisk's 8.1.0 gets the unix socket" args_are build "$UNIX_FLAG" //x
}

test_tcp_choice_from_env_bazelversion_and_version_query() {
  start_server
  cp "$stubs/bazel" "$T/bin/bazel-real"
  REAL="$T/bin/bazel-real"
  EXTRA_ENV=(CLONESTAGE_TCP=1)
  launch build //x
  check "CLONESTAGE_TCP=1 forces TCP" args_are "$TCP_RC" build //x
  EXTRA_ENV=(CLONESTAGE_TCP=0 USE_BAZEL_VERSION=4.2.3)
  launch build //x
  check "CLONESTAGE_TCP=0 forces the socket" args_are build "$UNIX_FLAG" //x
  EXTRA_ENV=(USE_BAZEL_VERSION=5.1.0)
  launch build //x
  check "USE_BAZEL_VERSION=5.1.0 means TCP" args_are "$TCP_RC" build //x
  EXTRA_ENV=()
  echo "4.2.3" >"$T/ws/.bazelversion"
  launch build //x
  check ".bazelversion 4.2.3 means TCP" args_are "$TCP_RC" build //x
  echo "mirror/7.6.1" >"$T/ws/.bazelversion"
  launch build //x
  check ".bazelversion fork/7.6.1 means the socket" args_are build "$UNIX_FLAG" //x
  rm "$T/ws/.bazelversion"
  EXTRA_ENV=(STUB_BAZEL_VERSION="bazel no_version")
  launch build //x
  check "'bazel no_version' (Debian 4.2.3) means TCP" args_are "$TCP_RC" build //x
  EXTRA_ENV=(STUB_BAZEL_VERSION="bazel 8.2.1")
  launch build //x
  check "'bazel 8.2.1' means the socket" args_are build "$UNIX_FLAG" //x
}

# shellcheck source=tests/launcher/upstream_tests.sh
source "$here/upstream_tests.sh"

mode_of() { stat -c %a "$1" 2>/dev/null || stat -f %Lp "$1"; }
no_token_in_args() { ! grep -q secret-token "$T/bazel-args"; }

test_tcp_token_travels_in_an_rc_file_not_argv() {
  start_server
  EXTRA_ENV=(CLONESTAGE_TCP=1)
  launch build //x
  check "exit 0" equals "$RC" 0
  check "one startup option before the command" args_are "$TCP_RC" build //x
  check "no token in Bazel's arguments" no_token_in_args
  check "quiet" stderr_empty
  check "one address call (fast path)" equals "$(count_lines "$T/cache/stub-address-calls")" 1
  check "the launcher's rc is 0600" equals "$(mode_of "$T/cache/launcher/tcp.bazelrc")" 600
  check "it try-imports the server's rc" equals "$(grep -v '^#' "$T/cache/launcher/tcp.bazelrc")" \
    "try-import $T/cache/server/tcp.bazelrc"
  check "no token in the launcher's rc" bash -c "! grep -q secret-token '$T/cache/launcher/tcp.bazelrc'"
  launch --bazelrc=/tmp/mine.rc --output_base /tmp/ob test //x
  check "ours after the user's --bazelrc, before the command" args_are \
    --bazelrc=/tmp/mine.rc --output_base /tmp/ob "$TCP_RC" test //x
  launch --bazelrc=/dev/null --nohome_rc build //x
  check "ours before --bazelrc=/dev/null (Bazel reads none after it)" args_are \
    "$TCP_RC" --bazelrc=/dev/null --nohome_rc build //x
  launch --host_jvm_args -Xmx1g --bazelrc /dev/null build //x
  check "ours before --bazelrc /dev/null" args_are \
    --host_jvm_args -Xmx1g "$TCP_RC" --bazelrc /dev/null build //x
  launch --ignore_all_rc_files build //x
  check "--ignore_all_rc_files: untouched" args_are --ignore_all_rc_files build //x
  check "--ignore_all_rc_files: says why in one line" stderr_has "--ignore_all_rc_files: the TCP executor's token travels only in an rc file"
  launch query //x
  check "query: untouched" args_are query //x
}

test_tcp_keeps_bazels_output_root_private() {
  # Bazel's server logs the rc files' options, the token too, in java.log in its output base,
  # and resets the root and base to 0755 itself: the default root's parent is made private.
  start_server
  mkdir -p -m 755 "$T/home/.cache/bazel"
  EXTRA_ENV=(CLONESTAGE_TCP=1)
  launch build //x
  check "~/.cache/bazel made 0700" equals "$(mode_of "$T/home/.cache/bazel")" 700
  check "and Bazel got the rc" args_are "$TCP_RC" build //x
  chmod 755 "$T/home/.cache/bazel"
  launch build //x
  check "marked: not checked again (no fork on the fast path)" equals "$(mode_of "$T/home/.cache/bazel")" 755
  rm -rf "$T/home/.cache"
  launch --output_user_root="$T/our" build //x
  check "explicit --output_user_root: left to the user" no_file "$T/home/.cache"
  EXTRA_ENV=(CLONESTAGE_TCP=0)
  launch build //x
  check "unix socket: left alone" no_file "$T/home/.cache"
  EXTRA_ENV=(CLONESTAGE_TCP=1)
  : >"$T/home/.cache"
  launch build //x
  check "cannot make it private: no rc" args_are build //x
  check "and says why" stderr_has "cannot make $T/home/.cache/bazel private"
}

test_startup_options_before_command() {
  start_server
  launch --output_base /tmp/ob --bazelrc=/dev/null --nohome_rc --host_jvm_args -Xmx1g test -c opt //a:b
  check "flags after the command, startup options kept" args_are \
    --output_base /tmp/ob --bazelrc=/dev/null --nohome_rc --host_jvm_args -Xmx1g test "$UNIX_FLAG" -c opt //a:b
  launch --output_base /tmp/ob query //a:b
  check "startup options + query pass through" args_are --output_base /tmp/ob query //a:b
}

# shellcheck disable=SC2016 # the literal $HOME is the point
test_arguments_kept_verbatim() {
  start_server
  launch run //tool:x -- "a b" '' '*' '$HOME'
  check "spaces, empty, glob and \$ survive" args_are run "$UNIX_FLAG" //tool:x -- "a b" '' '*' '$HOME'
}

test_exit_status_is_bazels() {
  start_server
  EXTRA_ENV=(STUB_BAZEL_EXIT=3)
  launch build //x
  check "exit 3 from Bazel" equals "$RC" 3
  EXTRA_ENV=(STUB_BAZEL_EXIT=3 STUB_SERVE_FAIL=1)
  kill "$(cat "$T/cache/server/pid")"
  rm -rf "$T/cache/server"
  launch build //x
  check "exit 3 from Bazel when the helper failed too" equals "$RC" 3
}

test_starts_server_when_down_and_detaches_it() {
  launch build //x
  check "exit 0" equals "$RC" 0
  check "flags added" args_are build "$UNIX_FLAG" //x
  check "one server started" equals "$(count_lines "$T/cache/stub-serve-starts")" 1
  check "server still running after the command" equals "$(live_servers)" 1
  local pid sid mysid
  pid="$(head -n 1 "$T/cache/stub-serve-starts")"
  sid="$(ps -o sid= -p "$pid" | tr -d ' ')"
  mysid="$(ps -o sid= -p $$ | tr -d ' ')"
  check "server in its own session (Ctrl-C safe)" test -n "$sid" -a "$sid" != "$mysid"
  check "lock fd not leaked into Bazel" no_file "$T/bazel-args.fd9"
  check "launcher dir is 0700" equals "$(stat -c %a "$T/cache/launcher" 2>/dev/null || stat -f %Lp "$T/cache/launcher")" 700
  check "serve.log has the server's output" grep -q "stub serve: pid" "$T/cache/launcher/serve.log"
}

# The cache holds every input and output that goes through it: a launcher that creates it
# makes it 0700 at once, before any server opens (and tightens) it.
test_a_cache_dir_the_launcher_creates_is_private() {
  rm -rf "$T/cache"
  launch build //x
  check "exit 0" equals "$RC" 0
  check "new cache dir is 0700" equals "$(mode_of "$T/cache")" 700
}

test_command_substitution_does_not_wait_for_server() {
  # The detached server must not hold the caller's stdout/stderr pipes open.
  local out start end
  start="$(now_ms)"
  out="$(cd "$T/ws" && timeout 20 /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" \
    CLONESTAGE_CACHE="$T/cache" BAZEL_REAL="$REAL" "$T/ws/tools/bazel" build //x 2>&1)"
  end="$(now_ms)"
  check "returned promptly ($((end - start)) ms)" less_than $((end - start)) 10000
  check "printed the stub's arguments" test "$(printf '%s\n' "$out" | head -n 1)" = build
}

test_restart_after_server_died() {
  launch build //x
  kill "$(head -n 1 "$T/cache/stub-serve-starts")"
  sleep 0.1
  rm -rf "$T/cache/server" # a dead stub leaves its lock dir behind
  launch build //x
  check "flags after restart" args_are build "$UNIX_FLAG" //x
  check "second server started" equals "$(count_lines "$T/cache/stub-serve-starts")" 2
  check "no wait on a stale launcher lock" test "${ERR#*waiting}" = "$ERR"
  check "says it was restarted and why" stderr_has "the clonestage server on $T/cache had died since the last command (killed by signal 15); started a new one"
  check "quotes the end of its log" stderr_has "clonestage:   | stub serve: pid"
  check "a few lines at most" less_than "$(printf '%s\n' "$ERR" | wc -l)" 7
  # A server that stopped cleanly (exit 0, as after `clonestage stop`): restarted quietly.
  kill "$(sed -n 2p "$T/cache/stub-serve-starts")"
  sleep 0.1
  rm -rf "$T/cache/server"
  echo "clonestage-launcher: serve exited with status 0" >>"$T/cache/launcher/serve.log"
  launch build //x
  check "after a clean stop: flags" args_are build "$UNIX_FLAG" //x
  check "after a clean stop: quiet" stderr_empty
}

test_a_log_without_an_exit_line_means_the_server_died() {
  # The launcher's sh writes the exit line; killed with it (or a reboot), there is none.
  mkdir -p -m 700 "$T/cache/launcher"
  printf 'INFO clonestage server ready\nINFO probed staging method\n' >"$T/cache/launcher/serve.log"
  launch build //x
  check "flags" args_are build "$UNIX_FLAG" //x
  check "says so" stderr_has "had died since the last command (its log ends without an exit status: killed with its shell, or the machine restarted)"
  check "quotes the old log" stderr_has "clonestage:   | INFO probed staging method"
}

test_race_two_launches_start_one_server() {
  local i
  for i in 1 2 3; do
    EXTRA_ENV=(STUB_SERVE_DELAY=0.7)
    (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
      BAZEL_REAL="$REAL" STUB_BAZEL_OUT="$T/args.$i.a" STUB_SERVE_DELAY=0.7 "$T/ws/tools/bazel" build //a) \
      >/dev/null 2>"$T/err.$i.a" &
    local p1=$!
    (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
      BAZEL_REAL="$REAL" STUB_BAZEL_OUT="$T/args.$i.b" STUB_SERVE_DELAY=0.7 "$T/ws/tools/bazel" build //b) \
      >/dev/null 2>"$T/err.$i.b" &
    local p2=$!
    wait "$p1" "$p2"
    check "round $i: first launch got the flags" test "$(sed -n 2p "$T/args.$i.a")" = "$UNIX_FLAG"
    check "round $i: second launch got the flags" test "$(sed -n 2p "$T/args.$i.b")" = "$UNIX_FLAG"
    check "round $i: exactly one server started" equals "$(count_lines "$T/cache/stub-serve-starts")" 1
    check "round $i: one server running" equals "$(live_servers)" 1
    cleanup_servers
    sleep 0.1
    rm -rf "$T/cache"
    mkdir -p "$T/cache"
  done
}

test_race_without_lock_tools_still_one_server() {
  # No flock, perl or setsid on PATH: only `clonestage serve`'s own lock remains.
  local tool
  mkdir -p "$T/sys"
  for tool in bash env mkdir sleep tail sed grep find readlink cat rm; do
    ln -s "$(command -v "$tool")" "$T/sys/$tool"
  done
  SYS_PATH="$T/sys"
  (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
    BAZEL_REAL="$REAL" STUB_BAZEL_OUT="$T/args.a" STUB_SERVE_DELAY=0.5 "$T/ws/tools/bazel" build //a) \
    >/dev/null 2>"$T/err.a" &
  local p1=$!
  (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
    BAZEL_REAL="$REAL" STUB_BAZEL_OUT="$T/args.b" STUB_SERVE_DELAY=0.5 "$T/ws/tools/bazel" build //b) \
    >/dev/null 2>"$T/err.b" &
  local p2=$!
  wait "$p1" "$p2"
  ERR="$(cat "$T/err.a" "$T/err.b")"
  check "first launch got the flags" test "$(sed -n 2p "$T/args.a")" = "$UNIX_FLAG"
  check "second launch got the flags" test "$(sed -n 2p "$T/args.b")" = "$UNIX_FLAG"
  check "one server running" equals "$(live_servers)" 1
}

test_helper_fails_to_start() {
  EXTRA_ENV=(STUB_SERVE_FAIL=1)
  launch build //x
  check "exit 0 (Bazel ran)" equals "$RC" 0
  check "no flags" args_are build //x
  check "says the server exited" stderr_has "exited before it was ready"
  check "quotes the server log" stderr_has "stub serve: failing on purpose"
  check "says Bazel runs without the executor" stderr_has "running Bazel without the clonestage executor"
  check "gave up quickly (${ELAPSED_MS} ms)" less_than "$ELAPSED_MS" 5000
}

test_helper_never_ready_times_out() {
  EXTRA_ENV=(STUB_SERVE_HANG=1 CLONESTAGE_START_TIMEOUT=1)
  launch build //x
  check "no flags" args_are build //x
  check "says it timed out" stderr_has "was not ready after 1s"
  check "bounded wait (${ELAPSED_MS} ms)" less_than "$ELAPSED_MS" 4000
  cat "$T/cache/server/pid" >>"$T/extra-pids"
}

test_no_helper_and_no_cargo() {
  rm "$T/bin/clonestage"
  launch build //x
  check "no flags" args_are build //x
  check "explains" stderr_has "no clonestage helper found"
  check "exit 0" equals "$RC" 0
}

test_bad_clonestage_bin() {
  EXTRA_ENV=(CLONESTAGE_BIN=/nonexistent/clonestage)
  launch build //x
  check "no flags" args_are build //x
  check "names the variable" stderr_has "CLONESTAGE_BIN=/nonexistent/clonestage is not an executable file"
}

mark_checkout() { # make $1 look like a clonestage checkout (the launcher's marker)
  mkdir -p "$1/rust/cli"
  printf '[package]\nname = "clonestage"\n' >"$1/rust/cli/Cargo.toml"
  : >"$1/rust/Cargo.toml"
}

test_clonestage_bin_and_workspace_binary_are_used() {
  rm "$T/bin/clonestage"
  mkdir -p "$T/ws/rust/target/release"
  cp "$stubs/clonestage" "$T/ws/rust/target/release/clonestage"
  printf '[package]\nname = "my-tools"\n' >"$T/ws/rust/Cargo.toml"
  launch build //x
  check "a user's own rust/target/release/clonestage: not used" args_are build //x
  check "and says no helper was found" stderr_has "no clonestage helper found"
  mark_checkout "$T/ws"
  launch build //x
  check "a clonestage checkout's rust/target/release/clonestage used" args_are build "$UNIX_FLAG" //x
  cleanup_servers
  rm -rf "$T/cache"
  mkdir -p "$T/cache" "$T/elsewhere"
  cp "$stubs/clonestage" "$T/elsewhere/cs"
  EXTRA_ENV=(CLONESTAGE_BIN="$T/elsewhere/cs")
  launch build //x
  check "CLONESTAGE_BIN used" args_are build "$UNIX_FLAG" //x
}

install_script() { # a stub tools/install-binaries.sh in checkout $1 (its contract: both binaries
  # into the per-version home; cargo build --locked), logging to $T/install.log
  mkdir -p "$1/tools"
  cat >"$1/tools/install-binaries.sh" <<EOF
#!/usr/bin/env bash
echo "run in \$PWD" >>"$T/install.log"
[ "\${STUB_INSTALL_FAIL:-0}" = 1 ] && { echo "stub install: error" >&2; exit 1; }
cargo build --locked --release --manifest-path rust/Cargo.toml || exit 1
if [ -n "\${XDG_DATA_HOME:-}" ]; then d="\$XDG_DATA_HOME"; else d="\$HOME/.local/share"; fi
mkdir -p "\$d/clonestage/0.1.0/bin"
cp "$stubs/clonestage" "\$d/clonestage/0.1.0/bin/clonestage"
printf '#!/bin/sh\nexit 0\n' >"\$d/clonestage/0.1.0/bin/clonestage-spawn"
chmod +x "\$d/clonestage/0.1.0/bin/clonestage-spawn"
EOF
}

test_checkout_installs_both_binaries_once() {
  rm "$T/bin/clonestage"
  mark_checkout "$T/ws"
  install_script "$T/ws"
  cp "$stubs/cargo" "$T/bin/cargo"
  EXTRA_ENV=(STUB_CARGO_LOG="$T/cargo.log" STUB_CARGO_PWD_LOG="$T/cargo.pwd" STUB_CLONESTAGE="$stubs/clonestage")
  launch build //x
  check "the checkout's install-binaries.sh ran, in the checkout" equals "$(cat "$T/install.log" 2>/dev/null)" "run in $T/ws"
  check "cargo ran --locked (through the script)" grep -q -- "--locked" "$T/cargo.log"
  check "says it builds both" stderr_has "building and installing clonestage and clonestage-spawn once"
  check "helper in the per-version home" test -x "$T/home/.local/share/clonestage/0.1.0/bin/clonestage"
  check "spawn wrapper beside it" test -x "$T/home/.local/share/clonestage/0.1.0/bin/clonestage-spawn"
  check "flags added" args_are build "$UNIX_FLAG" //x
  launch build //x
  check "not built again" equals "$(count_lines "$T/install.log")" 1
  check "flags on the fast path" args_are build "$UNIX_FLAG" //x
  check "quiet on the fast path" stderr_empty
}

test_users_own_rust_manifest_is_never_built() {
  rm "$T/bin/clonestage"
  mkdir -p "$T/ws/rust/cli"
  printf '[workspace]\nmembers = ["cli"]\n' >"$T/ws/rust/Cargo.toml"
  printf '[package]\nname = "cli"\n' >"$T/ws/rust/cli/Cargo.toml"
  install_script "$T/ws" # even a script of that name is not run outside a clonestage checkout
  cp "$stubs/cargo" "$T/bin/cargo"
  EXTRA_ENV=(STUB_CARGO_LOG="$T/cargo.log" STUB_CLONESTAGE="$stubs/clonestage")
  launch build //x
  check "cargo never ran" no_file "$T/cargo.log"
  check "no script ran" no_file "$T/install.log"
  check "no flags" args_are build //x
  check "in one line" equals "$(printf '%s\n' "$ERR" | wc -l | tr -d ' ')" 1
  check "no helper, and how to install one" stderr_has "no clonestage helper found (looked in $T/home/.local/share/clonestage/0.1.0/bin and on PATH): install it with \`bazel run @clonestage//:install\`"
  check "exit 0" equals "$RC" 0
}

test_install_failure_does_not_block_bazel() {
  rm "$T/bin/clonestage"
  mark_checkout "$T/ws"
  install_script "$T/ws"
  cp "$stubs/cargo" "$T/bin/cargo"
  EXTRA_ENV=(STUB_CARGO_LOG="$T/cargo.log" STUB_CLONESTAGE="$stubs/clonestage" STUB_INSTALL_FAIL=1)
  launch build //x
  check "no flags" args_are build //x
  check "explains" stderr_has "bash $T/ws/tools/install-binaries.sh failed"
  check "exit 0" equals "$RC" 0
  launch build //x
  check "no retry right after a failure" equals "$(count_lines "$T/install.log")" 1
  check "says why it does not retry" stderr_has "failed less than 10 minutes ago"
  check "still runs Bazel" args_are build //x
  EXTRA_ENV=(STUB_CARGO_LOG="$T/cargo.log" STUB_CLONESTAGE="$stubs/clonestage" CLONESTAGE_REBUILD=1)
  launch build //x
  check "CLONESTAGE_REBUILD=1 retries" equals "$(count_lines "$T/install.log")" 2
  check "and then uses the helper" args_are build "$UNIX_FLAG" //x
}

test_per_version_home_comes_first() {
  # A logging helper in the per-version home, the plain stub on PATH.
  local home_bin="$T/data/clonestage/0.1.0/bin"
  mkdir -p "$home_bin"
  printf '#!/bin/sh\necho home >>"%s"\nexec "%s" "$@"\n' "$T/which" "$stubs/clonestage" >"$home_bin/clonestage"
  chmod +x "$home_bin/clonestage"
  EXTRA_ENV=(XDG_DATA_HOME="$T/data")
  launch build //x
  check "flags added" args_are build "$UNIX_FLAG" //x
  check "the per-version home's helper was used (XDG_DATA_HOME)" test -s "$T/which"
  rm -f "$T/which"
  cleanup_servers
  rm -rf "$T/cache" && mkdir -p "$T/cache"
  EXTRA_ENV=(XDG_DATA_HOME="relative/data")
  mkdir -p "$T/home/.local/share/clonestage/0.1.0"
  cp -r "$home_bin" "$T/home/.local/share/clonestage/0.1.0/"
  launch build //x
  check "a relative XDG_DATA_HOME is ignored: ~/.local/share" test -s "$T/which"
  check "flags added" args_are build "$UNIX_FLAG" //x
}

test_server_of_another_version_is_restarted_with_ours() {
  start_server STUB_VERSION=0.0.9
  launch build //x
  check "exit 0" equals "$RC" 0
  check "says so" stderr_has "the clonestage server on $T/cache is version 0.0.9, this launcher's helper ($T/bin/clonestage) is 0.1.0: restarting it with ours"
  check "in one line" equals "$(printf '%s\n' "$ERR" | wc -l | tr -d ' ')" 1
  check "stopped it cleanly (clonestage stop)" equals "$(count_lines "$T/cache/stub-stop-calls")" 1
  check "started ours" equals "$(count_lines "$T/cache/stub-serve-starts")" 2
  check "one server running" equals "$(live_servers)" 1
  check "ours runs" equals "$(cat "$T/cache/server/version" 2>/dev/null)" 0.1.0
  check "flags added" args_are build "$UNIX_FLAG" //x
  launch build //x
  check "then the fast path: quiet" stderr_empty
  check "no second restart" equals "$(count_lines "$T/cache/stub-serve-starts")" 2
}

test_a_server_of_another_version_that_will_not_stop() {
  start_server STUB_VERSION=0.0.9
  rm "$T/cache/server/version" # as a server from before the version file
  EXTRA_ENV=(STUB_STOP_FAIL=1)
  launch build //x
  check "exit 0 (Bazel ran)" equals "$RC" 0
  check "no flags: not the other version's server" args_are build //x
  check "names the unknown version" stderr_has "is version unknown (it wrote no version file)"
  check "says it could not stop it, and why" stderr_has "could not stop the server of version unknown (it wrote no version file) on $T/cache: clonestage: the server (pid 1) got SIGTERM but still runs after 30s; running Bazel without the clonestage executor"
  check "no second server" equals "$(count_lines "$T/cache/stub-serve-starts")" 1
}

test_digest_function_other_than_sha256_stands_aside() {
  start_server
  launch --digest_function=blake3 build //x
  check "blake3: untouched" args_are --digest_function=blake3 build //x
  check "blake3: says why" stderr_has "--digest_function=blake3: the clonestage server hashes with SHA-256 only, so this command runs without clonestage"
  check "in one line" equals "$(printf '%s\n' "$ERR" | wc -l | tr -d ' ')" 1
  launch --digest_function BLAKE3 test //x
  check "unary form: untouched" args_are --digest_function BLAKE3 test //x
  check "unary form: says why" stderr_has "--digest_function=BLAKE3"
  launch --digest_function=SHA256 build //x
  check "sha256: flags added" args_are --digest_function=SHA256 build "$UNIX_FLAG" //x
  check "sha256: quiet" stderr_empty
  launch --digest_function=blake3 query //x
  check "query: untouched and quiet" stderr_empty
  # A startup line in the workspace's .bazelrc (last one wins, as in Bazel).
  printf '%s\n' 'build --jobs=2' 'startup --digest_function=sha256' \
    'startup --host_jvm_args=-Xmx1g   --digest_function  BLAKE3 # team setting' >"$T/ws/.bazelrc"
  launch build //x
  check "rc blake3: untouched" args_are build //x
  check "rc blake3: says why and where" stderr_has "--digest_function=BLAKE3 (a startup line in $T/ws/.bazelrc): the clonestage server hashes with SHA-256 only"
  launch --digest_function=sha256 build //x
  check "the command line wins over the rc" args_are --digest_function=sha256 build "$UNIX_FLAG" //x
  printf 'startup --digest_function=blake3\n' >"$T/ws/.bazelrc"
  printf 'startup --digest_function=SHA256\n' >"$T/home/.bazelrc"
  launch build //x
  check "~/.bazelrc (read after the workspace's) wins" args_are build "$UNIX_FLAG" //x
  rm "$T/ws/.bazelrc"
  printf 'startup --digest_function=blake3\n' >"$T/home/.bazelrc"
  launch build //x
  check "~/.bazelrc blake3: untouched" args_are build //x
  check "~/.bazelrc blake3: says where" stderr_has "(a startup line in $T/home/.bazelrc)"
  launch --nohome_rc build //x
  check "--nohome_rc: ~/.bazelrc not read" args_are --nohome_rc build "$UNIX_FLAG" //x
}

test_symlinked_launcher_finds_its_checkout() {
  # examples/*/tools/bazel are symlinks to the checkout's tools/bazel.
  rm "$T/bin/clonestage"
  mkdir -p "$T/checkout/tools" "$T/checkout/rust/target/release" "$T/ex/tools"
  cp "$launcher" "$T/checkout/tools/bazel"
  cp "$stubs/clonestage" "$T/checkout/rust/target/release/clonestage"
  ln -s ../../checkout/tools/bazel "$T/ex/tools/bazel"
  mark_checkout "$T/checkout"
  (cd "$T/ex" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
    BAZEL_REAL="$REAL" STUB_BAZEL_OUT="$T/bazel-args" tools/bazel build //x) 2>"$T/stderr"
  ERR="$(cat "$T/stderr")"
  check "checkout's helper used" args_are build "$UNIX_FLAG" //x
}

test_explicit_executor_wins() {
  # Another executor named on the command line: no clonestage flags, so the
  # token header never reaches it.
  start_server
  EXTRA_ENV=(CLONESTAGE_TCP=1)
  launch build --remote_executor=grpcs://rbe.example:443 //x
  check "executor flag: untouched" args_are build --remote_executor=grpcs://rbe.example:443 //x
  check "and says so in one line" stderr_has "--remote_executor is on the command line: adding no clonestage executor"
  launch test --remote_cache grpc://cache:9092 //x
  check "cache flag: untouched" args_are test --remote_cache grpc://cache:9092 //x
  launch run //tool -- --remote_executor=x
  check "after --: still ours" args_are "$TCP_RC" run //tool -- --remote_executor=x
}

test_disable() {
  start_server
  EXTRA_ENV=(CLONESTAGE_DISABLE=1)
  launch build //x
  check "untouched" args_are build //x
  check "helper not asked" equals "$(count_lines "$T/cache/stub-address-calls")" 0
}

test_finds_real_bazel_on_path_without_looping() {
  start_server
  mkdir -p "$T/front"
  ln -s "$T/ws/tools/bazel" "$T/front/bazel" # the launcher itself first on PATH
  cp "$stubs/bazel" "$T/bin/bazel"
  (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/front:$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
    STUB_BAZEL_OUT="$T/bazel-args" USE_BAZEL_VERSION=7.4.1 "$T/front/bazel" build //x) 2>"$T/stderr"
  ERR="$(cat "$T/stderr")"
  check "ran the stub with flags" args_are build "$UNIX_FLAG" //x
  check "told Bazelisk not to run tools/bazel again" equals "$(cat "$T/bazel-args.skip")" true
}

test_wrapper_reentry_adds_flags_once() {
  # Like Debian's /usr/bin/bazel: a wrapper that sets BAZEL_REAL and runs
  # <workspace>/tools/bazel, found on PATH by a launcher without BAZEL_REAL.
  start_server
  cp "$stubs/bazel" "$T/bin/bazel-4"
  cat >"$T/bin/bazel" <<EOF
#!/usr/bin/env bash
export BAZEL_REAL="$T/bin/bazel-4"
exec "\$PWD/tools/bazel" "\$@"
EOF
  chmod +x "$T/bin/bazel"
  (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
    STUB_BAZEL_OUT="$T/bazel-args" CLONESTAGE_TCP=1 "$T/bin/bazel" build //x) 2>"$T/stderr"
  ERR="$(cat "$T/stderr")"
  check "flags exactly once" args_are "$TCP_RC" build //x
}

test_fast_path_overhead() {
  # Added latency with the server up: launcher -> stub address -> stub Bazel,
  # against calling the stub Bazel directly. Bazel 7 named in BAZEL_REAL's
  # path, so no `bazel --version` is needed (the common Bazelisk case).
  if [ -z "${EPOCHREALTIME:-}" ]; then
    echo "    (skipped: bash without EPOCHREALTIME)"
    return
  fi
  start_server
  local n=30 i t0 t1 direct launched per_direct per_launch
  t0="$(now_us)"
  for ((i = 0; i < n; i++)); do
    (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" STUB_BAZEL_OUT=/dev/null \
      "$REAL" build //x)
  done
  t1="$(now_us)"
  direct=$((t1 - t0))
  t0="$(now_us)"
  for ((i = 0; i < n; i++)); do
    (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
      BAZEL_REAL="$REAL" STUB_BAZEL_OUT=/dev/null "$T/ws/tools/bazel" build //x)
  done
  t1="$(now_us)"
  launched=$((t1 - t0))
  per_direct=$((direct / n))
  per_launch=$((launched / n))
  local added=$(((per_launch - per_direct) / 1000))
  echo "    fast path: stub bazel alone $((per_direct / 1000)).$(((per_direct % 1000) / 100)) ms," \
    "through tools/bazel $((per_launch / 1000)).$(((per_launch % 1000) / 100)) ms," \
    "added $(((per_launch - per_direct) / 1000)).$((((per_launch - per_direct) % 1000) / 100)) ms per command (n=$n)"
  check "adds under 50 ms (added ${added} ms)" less_than "$added" 50
}

now_us() {
  local t="${EPOCHREALTIME/[.,]/}"
  echo "$t"
}

# --- run --------------------------------------------------------------------------

tests=(
  test_non_build_commands_pass_through
  test_fast_path_inserts_unix_flags_after_command
  test_tcp_for_bazel_4_and_5
  test_tcp_choice_from_env_bazelversion_and_version_query
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
  test_server_of_another_version_is_restarted_with_ours
  test_a_server_of_another_version_that_will_not_stop
  test_digest_function_other_than_sha256_stands_aside
  test_symlinked_launcher_finds_its_checkout
  test_explicit_executor_wins
  test_disable
  test_finds_real_bazel_on_path_without_looping
  test_wrapper_reentry_adds_flags_once
  test_fast_path_overhead
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
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
