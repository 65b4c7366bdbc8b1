# tests/launcher/cases.sh: the launcher's behaviours, one test each, sourced by
# tests/launcher/run.sh, which runs these functions with its fixtures (setup, launch, check,
# start_server, ...). The contract they check is rust/cli/src/launch/mod.rs's and tools/bazel's.
# shellcheck shell=bash disable=SC2034 # EXTRA_ENV and friends are run.sh's

test_non_build_commands_pass_through() {
  local cmd
  for cmd in version query help info shutdown clean fetch sync; do
    launch "$cmd" //x
    check "$cmd: arguments unchanged" args_are "$cmd" //x
    check "$cmd: quiet" stderr_empty
  done
  launch --version
  check "--version passes through" equals "$(cat "$T/stdout")" "bazel 7.4.1"
  launch
  check "no arguments pass through" args_are
  check "no server started for them" no_file "$T/cache/server"
}

test_fast_path_passes_the_rc_before_the_command() {
  start_server
  local pid
  pid="$(server_pid)"
  launch build //foo:bar --jobs=2
  check "exit 0" equals "$RC" 0
  check "the rc file right before the command word" args_are @RC build //foo:bar --jobs=2
  check "Bazel 7.4.1 gets the unix socket" rc_is_unix
  check "no new server" equals "$(server_pid)" "$pid"
  check "quiet" stderr_empty
  local cmd
  for cmd in test run coverage cquery aquery mobile-install; do
    launch "$cmd" //t
    check "$cmd gets the rc" args_are @RC "$cmd" //t
  done
}

test_tcp_for_bazel_4_and_5() {
  start_server
  cp "$stubs/bazel" "$T/bin/bazel-4"
  REAL="$T/bin/bazel-4"
  launch build //x
  check "bazel-4 (Debian) gets TCP (token in an rc file)" rc_is_tcp
  mkdir -p "$T/bazelisk/downloads/bazelbuild/bazel-5.4.1-linux-x86_64/bin"
  cp "$stubs/bazel" "$T/bazelisk/downloads/bazelbuild/bazel-5.4.1-linux-x86_64/bin/bazel"
  REAL="$T/bazelisk/downloads/bazelbuild/bazel-5.4.1-linux-x86_64/bin/bazel"
  launch build //x
  check "Bazelisk's 5.4.1 gets TCP" rc_is_tcp
  mkdir -p "$T/bazelisk/downloads/bazelbuild/bazel-8.1.0-linux-x86_64/bin"
  cp "$stubs/bazel" "$T/bazelisk/downloads/bazelbuild/bazel-8.1.0-linux-x86_64/bin/bazel"
  REAL="$T/bazelisk/downloads/bazelbuild/bazel-8.1.0-linux-x86_64/bin/bazel"
  launch build //x
  check "Bazelisk's 8.1.0 gets the unix socket" rc_is_unix
  check "args" args_are @RC build //x
}

test_tcp_choice_from_env_bazelversion_and_version_query() {
  start_server
  cp "$stubs/bazel" "$T/bin/bazel-real"
  REAL="$T/bin/bazel-real"
  EXTRA_ENV=(CLONESTAGE_TCP=1)
  launch build //x
  check "CLONESTAGE_TCP=1 forces TCP" rc_is_tcp
  EXTRA_ENV=(CLONESTAGE_TCP=0 USE_BAZEL_VERSION=4.2.3)
  launch build //x
  check "CLONESTAGE_TCP=0 forces the socket" rc_is_unix
  EXTRA_ENV=(USE_BAZEL_VERSION=5.1.0)
  launch build //x
  check "USE_BAZEL_VERSION=5.1.0 means TCP" rc_is_tcp
  EXTRA_ENV=()
  echo "4.2.3" >"$T/ws/.bazelversion"
  launch build //x
  check ".bazelversion 4.2.3 means TCP" rc_is_tcp
  echo "mirror/7.6.1" >"$T/ws/.bazelversion"
  launch build //x
  check ".bazelversion fork/7.6.1 means the socket" rc_is_unix
  rm "$T/ws/.bazelversion"
  EXTRA_ENV=(STUB_BAZEL_VERSION="bazel no_version")
  launch build //x
  check "'bazel no_version' (Debian 4.2.3) means TCP" rc_is_tcp
  EXTRA_ENV=(STUB_BAZEL_VERSION="bazel 8.2.1")
  launch build //x
  check "'bazel 8.2.1' means the socket" rc_is_unix
}

# The settings per Bazel release (rust/cli/src/bazel/settings.rs) and the mnemonic list of the
# rules_swift releases supported (1.x, 2.x, 3.x; read at their tags: issue 22, item 8).
test_the_rc_holds_the_settings_for_that_bazel() {
  start_server
  local rc m
  launch build //x
  rc="$(our_rc)"
  for m in SwiftCompile SwiftDeriveFiles SwiftDumpAST SwiftPrecompileCModule \
    SwiftCompileModuleInterface SwiftSymbolGraphExtract SwiftSynthesizeInterface ObjcCompile CppCompile; do
    check "routes $m" grep -qx "build --strategy=$m=remote,local" "$rc"
  done
  check "names no mnemonic rules_swift never registered" \
    bash -c "! grep -Eq 'SwiftCompileModule=|SwiftCompileCodegen' '$rc'"
  check "every non-comment line is a build line or the executor" \
    bash -c "! grep -v '^#' '$rc' | grep -qv '^build --'"
  check "resets the team's caches" grep -qx 'build --remote_cache=' "$rc"
  check "7.4.1: no compression over loopback" grep -q '^build --noremote_cache_compression  # Bazel 7.0.0 and later$' "$rc"
  check "7.4.1: modify_execution_info composes" grep -q '^build --incompatible_modify_execution_info_additive  # Bazel 7.2.0 to 8.x$' "$rc"
  check "7.4.1: Xcode's no-remote removed from the compiles" \
    grep -q '^build --modify_execution_info=SwiftCompile|.*CppCompile=-no-remote  # Bazel 7.2.0 and later$' "$rc"
  check "no merkle tree cache" bash -c "! grep -q merkle '$rc'"
  EXTRA_ENV=(USE_BAZEL_VERSION=6.5.0)
  launch build //x
  rc="$(our_rc)"
  check "6.5.0: the 5.x/6.x name of the compression flag" grep -q '^build --noexperimental_remote_cache_compression  # Bazel 5.0.0 to 6.x$' "$rc"
  check "6.5.0: no --modify_execution_info (it would replace the team's)" bash -c "! grep -q modify_execution_info '$rc'"
  EXTRA_ENV=(STUB_BAZEL_VERSION="bazel no_version")
  cp "$stubs/bazel" "$T/bin/bazel-real"
  REAL="$T/bin/bazel-real"
  launch build //x
  rc="$(our_rc)"
  check "unknown version: no version-specific line" \
    bash -c "! grep -Eq 'compression|modify_execution_info' '$rc'"
}

no_token_in_args() { ! grep -q "$(cat "$T/cache/server/token")" "$T/bazel-args"; }

test_tcp_token_travels_in_an_rc_file_not_argv() {
  start_server
  EXTRA_ENV=(CLONESTAGE_TCP=1)
  launch build //x
  check "exit 0" equals "$RC" 0
  check "one startup option before the command" args_are @RC build //x
  check "no token in Bazel's arguments" no_token_in_args
  check "quiet" stderr_empty
  check "the launcher's rc is 0600" equals "$(mode_of "$(our_rc)")" 600
  check "it try-imports the server's rc" rc_is_tcp
  check "no token in the launcher's rc" bash -c "! grep -q '$(cat "$T/cache/server/token")' '$(our_rc)'"
  launch --bazelrc=/tmp/mine.rc --output_base /tmp/ob test //x
  check "ours after the user's --bazelrc, before the command" args_are \
    --bazelrc=/tmp/mine.rc --output_base /tmp/ob @RC test //x
  launch --bazelrc=/dev/null --nohome_rc build //x
  check "ours before --bazelrc=/dev/null (Bazel reads none after it)" args_are \
    @RC --bazelrc=/dev/null --nohome_rc build //x
  launch --host_jvm_args -Xmx1g --bazelrc /dev/null build //x
  check "ours before --bazelrc /dev/null" args_are \
    --host_jvm_args -Xmx1g @RC --bazelrc /dev/null build //x
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
  check "and Bazel got the rc" args_are @RC build //x
  chmod 755 "$T/home/.cache/bazel"
  launch build //x
  check "marked: not checked again (a stat on the fast path)" equals "$(mode_of "$T/home/.cache/bazel")" 755
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
  rm -f "$T/home/.cache"
  EXTRA_ENV=(CLONESTAGE_TCP=1 XDG_CACHE_HOME="$T/xdgc")
  launch build //x
  check "current Bazel's \$XDG_CACHE_HOME/bazel made 0700 too" equals "$(mode_of "$T/xdgc/bazel")" 700
}

test_startup_options_before_command() {
  start_server
  launch --output_base /tmp/ob --bazelrc=/dev/null --nohome_rc --host_jvm_args -Xmx1g test -c opt //a:b
  check "rc before /dev/null, startup options kept" args_are \
    --output_base /tmp/ob @RC --bazelrc=/dev/null --nohome_rc --host_jvm_args -Xmx1g test -c opt //a:b
  launch --output_base /tmp/ob query //a:b
  check "startup options + query pass through" args_are --output_base /tmp/ob query //a:b
}

# shellcheck disable=SC2016 # the literal $HOME is the point
test_arguments_kept_verbatim() {
  start_server
  launch run //tool:x -- "a b" '' '*' '$HOME' -- --remote_executor=x
  check "spaces, empty, glob, \$ and a second -- survive" args_are @RC run //tool:x -- "a b" '' '*' '$HOME' -- --remote_executor=x
}

test_exit_status_is_bazels() {
  start_server
  EXTRA_ENV=(STUB_BAZEL_EXIT=3)
  launch build //x
  check "exit 3 from Bazel" equals "$RC" 3
  stop_servers
  EXTRA_ENV=(STUB_BAZEL_EXIT=3 CLONESTAGE_SPAWN=/nonexistent)
  launch build //x
  check "exit 3 from Bazel when the server failed too" equals "$RC" 3
  launch query //x
  check "exit 3 from Bazel for a command that is not a build" equals "$RC" 3
}

test_starts_server_when_down_and_detaches_it() {
  launch build //x
  check "exit 0" equals "$RC" 0
  check "rc added" args_are @RC build //x
  local pid sid mysid
  pid="$(server_pid)"
  check "a server runs after the command" alive "$pid"
  sid="$(ps -o sid= -p "$pid" | tr -d ' ')"
  mysid="$(ps -o sid= -p $$ | tr -d ' ')"
  check "server in its own session (Ctrl-C safe)" test -n "$sid" -a "$sid" != "$mysid"
  check "lock fd not leaked into Bazel" no_file "$T/bazel-args.fd9"
  check "no launcher file descriptor in the server" \
    bash -c "! ls -l /proc/$pid/fd 2>/dev/null | grep -q 'launcher/lock'"
  check "launcher dir is 0700" equals "$(mode_of "$T/cache/launcher")" 700
  check "serve.log has the server's output" grep -q "INFO" "$T/cache/launcher/serve.log"
  check "quiet" stderr_empty
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
  start="$(date +%s)"
  out="$(cd "$T/ws" && timeout 20 /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" \
    CLONESTAGE_CACHE="$T/cache" BAZEL_REAL="$REAL" "$T/ws/tools/bazel" build //x 2>&1)"
  end="$(date +%s)"
  check "returned promptly ($((end - start)) s)" less_than $((end - start)) 10
  check "printed the stub's arguments" test "$(printf '%s\n' "$out" | sed -n 2p)" = build
}

test_restart_after_server_died() {
  launch build //x
  local first second
  first="$(server_pid)"
  kill -9 "$first"
  wait_gone "$first"
  launch build //x
  second="$(server_pid)"
  check "rc after restart" args_are @RC build //x
  check "a second server" test -n "$second" -a "$second" != "$first"
  check "no wait on a stale launcher lock" stderr_lacks waiting
  check "says it was restarted and why" stderr_has "the clonestage server on $T/cache had died since the last command (killed by signal 9); started a new one"
  check "quotes the end of its log" stderr_has "clonestage:   | "
  check "a few lines at most" less_than "$(stderr_lines)" 7
  # A server that stopped cleanly (SIGTERM: it drains, exits 0): restarted quietly.
  kill "$second"
  wait_gone "$second"
  launch build //x
  check "after a clean stop: rc" args_are @RC build //x
  check "after a clean stop: quiet" stderr_empty
  check "after a clean stop: a third server" test "$(server_pid)" != "$second"
}

test_a_log_without_an_exit_line_means_the_server_died() {
  # The supervisor writes the exit line; killed with it (or a reboot), there is none.
  mkdir -p -m 700 "$T/cache/launcher"
  printf 'INFO clonestage server ready\nINFO probed staging method\n' >"$T/cache/launcher/serve.log"
  launch build //x
  check "rc" args_are @RC build //x
  check "says so" stderr_has "had died since the last command (its log ends without an exit status"
  check "quotes the old log" stderr_has "clonestage:   | INFO probed staging method"
}

test_race_two_launches_start_one_server() {
  local i p1 p2
  for i in 1 2 3; do
    (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
      BAZEL_REAL="$REAL" STUB_BAZEL_OUT="$T/args.$i.a" "$T/ws/tools/bazel" build //a) \
      >/dev/null 2>"$T/err.$i.a" &
    p1=$!
    (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
      BAZEL_REAL="$REAL" STUB_BAZEL_OUT="$T/args.$i.b" "$T/ws/tools/bazel" build //b) \
      >/dev/null 2>"$T/err.$i.b" &
    p2=$!
    wait "$p1" "$p2"
    check "round $i: first launch got the rc" grep -q '^--bazelrc=.*/launcher/bazelrc/' "$T/args.$i.a"
    check "round $i: second launch got the rc" grep -q '^--bazelrc=.*/launcher/bazelrc/' "$T/args.$i.b"
    check "round $i: exactly one server started" equals "$(grep -c 'clonestage server ready' "$T/cache/launcher/serve.log" 2>/dev/null)" 1
    check "round $i: no server lost the lock" bash -c "! grep -q 'already serves' '$T/cache/launcher/serve.log'"
    check "round $i: one server running" alive "$(server_pid)"
    stop_servers
    rm -rf "$T/cache"
    mkdir -p "$T/cache"
  done
}

test_race_without_lock_tools_still_one_server() {
  # No flock, perl or setsid on PATH: the launcher uses none of them.
  local tool p1 p2
  mkdir -p "$T/sys"
  for tool in env cat grep readlink find mkdir rm; do
    ln -s "$(command -v "$tool")" "$T/sys/$tool"
  done
  ln -s "$(command -v bash)" "$T/sys/bash"
  SYS_PATH="$T/sys"
  (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
    BAZEL_REAL="$REAL" STUB_BAZEL_OUT="$T/args.a" /bin/sh "$T/ws/tools/bazel" build //a) >/dev/null 2>"$T/err.a" &
  p1=$!
  (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
    BAZEL_REAL="$REAL" STUB_BAZEL_OUT="$T/args.b" /bin/sh "$T/ws/tools/bazel" build //b) >/dev/null 2>"$T/err.b" &
  p2=$!
  wait "$p1" "$p2"
  ERR="$(cat "$T/err.a" "$T/err.b")"
  check "first launch got the rc" grep -q '^--bazelrc=' "$T/args.a"
  check "second launch got the rc" grep -q '^--bazelrc=' "$T/args.b"
  check "quiet" stderr_empty
  check "one server running" alive "$(server_pid)"
}

test_helper_fails_to_start() {
  EXTRA_ENV=(CLONESTAGE_SPAWN=/nonexistent/clonestage-spawn)
  local t0=$SECONDS
  launch build //x
  check "exit 0 (Bazel ran)" equals "$RC" 0
  check "no rc" args_are build //x
  check "says the server exited" stderr_has "exited before it was ready"
  check "quotes the server log" stderr_has "cannot find the spawn wrapper"
  check "says Bazel runs without the executor" stderr_has "running Bazel without the clonestage executor, with your workspace's own settings"
  check "gave up quickly ($((SECONDS - t0)) s)" less_than $((SECONDS - t0)) 5
}

# A stand-in server that holds the cache's lock: VERSION (or none) and a tcp-port only when
# READY=1; it ignores SIGTERM. Its pid goes to $T/extra-pids.
fake_server() { # fake_server VERSION READY
  mkdir -p -m 700 "$T/cache/server"
  (python3 - "$T/cache/server" "$1" "$2" "$T/extra-pids" <<'EOF' &)
import fcntl, os, signal, sys, time
d, version, ready, pids = sys.argv[1:]
open(pids, "a").write("%d\n" % os.getpid())
signal.signal(signal.SIGTERM, signal.SIG_IGN)
f = open(os.path.join(d, "lock"), "a+")
fcntl.flock(f, fcntl.LOCK_EX)
f.truncate(0); f.write("%d\n" % os.getpid()); f.flush()
if version:
    open(os.path.join(d, "version"), "w").write(version + "\n")
if ready == "1":
    open(os.path.join(d, "tcp-port"), "w").write("45678\n%d\n" % os.getpid())
time.sleep(300)
EOF
  local i
  for i in $(seq 1 100); do
    [ -s "$T/cache/server/lock" ] && break
    sleep 0.05
  done
  sleep 0.2
}

test_helper_never_ready_times_out() {
  fake_server "$version" 0
  EXTRA_ENV=(CLONESTAGE_START_TIMEOUT=1)
  local t0=$SECONDS
  launch build //x
  check "no rc" args_are build //x
  check "says it timed out" stderr_has "was not ready after 1s"
  check "bounded wait ($((SECONDS - t0)) s)" less_than $((SECONDS - t0)) 4
}

test_no_helper_and_no_cargo() {
  rm "$T/bin/clonestage"
  launch build //x
  check "no rc" args_are build //x
  check "explains" stderr_has "no clonestage helper found"
  check "exit 0" equals "$RC" 0
  launch query //x
  check "a command that does not build: quiet" stderr_empty
}

test_bad_clonestage_bin() {
  EXTRA_ENV=(CLONESTAGE_BIN=/nonexistent/clonestage)
  launch build //x
  check "no rc" args_are build //x
  check "names the variable" stderr_has "CLONESTAGE_BIN=/nonexistent/clonestage is not an executable file"
}

mark_checkout() { # make $1 look like a clonestage checkout (the shim's marker)
  mkdir -p "$1/rust/cli"
  printf '[package]\nname = "clonestage"\n' >"$1/rust/cli/Cargo.toml"
  : >"$1/rust/Cargo.toml"
}

test_clonestage_bin_and_workspace_binary_are_used() {
  rm "$T/bin/clonestage"
  link_helper "$T/ws/rust/target/release/clonestage"
  printf '[package]\nname = "my-tools"\n' >"$T/ws/rust/Cargo.toml"
  launch build //x
  check "a user's own rust/target/release/clonestage: not used" args_are build //x
  check "and says no helper was found" stderr_has "no clonestage helper found"
  mark_checkout "$T/ws"
  launch build //x
  check "a clonestage checkout's rust/target/release/clonestage used" args_are @RC build //x
  stop_servers
  rm -rf "$T/cache"
  mkdir -p "$T/cache"
  link_helper "$T/elsewhere/cs"
  printf '#!/bin/sh\necho bin >>"%s"\nexec "%s" "$@"\n' "$T/which" "$T/elsewhere/cs" >"$T/elsewhere/logged"
  chmod +x "$T/elsewhere/logged"
  EXTRA_ENV=(CLONESTAGE_BIN="$T/elsewhere/logged")
  launch build //x
  check "CLONESTAGE_BIN used" test -s "$T/which"
  check "rc" args_are @RC build //x
}

install_script() { # a stand-in tools/install-binaries.sh in checkout $1 (its contract: both
  # binaries into the per-version home; cargo build --locked), logging to $T/install.log
  mkdir -p "$1/tools"
  cat >"$1/tools/install-binaries.sh" <<EOF
#!/usr/bin/env bash
echo "run in \$PWD" >>"$T/install.log"
[ "\${STUB_INSTALL_FAIL:-0}" = 1 ] && { echo "stub install: error" >&2; exit 1; }
cargo build --locked --release --manifest-path rust/Cargo.toml || exit 1
if [ -n "\${XDG_DATA_HOME:-}" ]; then d="\$XDG_DATA_HOME"; else d="\$HOME/.local/share"; fi
mkdir -p "\$d/clonestage/$version/bin"
ln -f "$helper_bin" "\$d/clonestage/$version/bin/clonestage" 2>/dev/null || cp "$helper_bin" "\$d/clonestage/$version/bin/clonestage"
printf '#!/bin/sh\nexit 0\n' >"\$d/clonestage/$version/bin/clonestage-spawn"
chmod +x "\$d/clonestage/$version/bin/clonestage-spawn"
EOF
}

test_checkout_installs_both_binaries_once() {
  rm "$T/bin/clonestage"
  mark_checkout "$T/ws"
  install_script "$T/ws"
  cp "$stubs/cargo" "$T/bin/cargo"
  EXTRA_ENV=(STUB_CARGO_LOG="$T/cargo.log" STUB_CLONESTAGE="$helper_bin")
  launch build //x
  check "the checkout's install-binaries.sh ran, in the checkout" equals "$(cat "$T/install.log" 2>/dev/null)" "run in $T/ws"
  check "cargo ran --locked (through the script)" grep -q -- "--locked" "$T/cargo.log"
  check "says it builds both" stderr_has "building and installing clonestage and clonestage-spawn once"
  check "helper in the per-version home" test -x "$T/home/.local/share/clonestage/$version/bin/clonestage"
  check "spawn wrapper beside it" test -x "$T/home/.local/share/clonestage/$version/bin/clonestage-spawn"
  check "rc added" args_are @RC build //x
  launch build //x
  check "not built again" equals "$(wc -l <"$T/install.log" | tr -d ' ')" 1
  check "rc on the fast path" args_are @RC build //x
  check "quiet on the fast path" stderr_empty
}

test_users_own_rust_manifest_is_never_built() {
  rm "$T/bin/clonestage"
  mkdir -p "$T/ws/rust/cli"
  printf '[workspace]\nmembers = ["cli"]\n' >"$T/ws/rust/Cargo.toml"
  printf '[package]\nname = "cli"\n' >"$T/ws/rust/cli/Cargo.toml"
  install_script "$T/ws" # even a script of that name is not run outside a clonestage checkout
  cp "$stubs/cargo" "$T/bin/cargo"
  EXTRA_ENV=(STUB_CARGO_LOG="$T/cargo.log" STUB_CLONESTAGE="$helper_bin")
  launch build //x
  check "cargo never ran" no_file "$T/cargo.log"
  check "no script ran" no_file "$T/install.log"
  check "no rc" args_are build //x
  check "in one line" equals "$(stderr_lines)" 1
  check "no helper, and how to install one" stderr_has "no clonestage helper found (looked in $T/home/.local/share/clonestage/$version/bin and on PATH): install it with \`bazel run @clonestage//:install\`"
  check "exit 0" equals "$RC" 0
}

test_install_failure_does_not_block_bazel() {
  rm "$T/bin/clonestage"
  mark_checkout "$T/ws"
  install_script "$T/ws"
  cp "$stubs/cargo" "$T/bin/cargo"
  EXTRA_ENV=(STUB_CARGO_LOG="$T/cargo.log" STUB_CLONESTAGE="$helper_bin" STUB_INSTALL_FAIL=1)
  launch build //x
  check "no rc" args_are build //x
  check "explains" stderr_has "bash $T/ws/tools/install-binaries.sh failed"
  check "exit 0" equals "$RC" 0
  launch build //x
  check "no retry right after a failure" equals "$(wc -l <"$T/install.log" | tr -d ' ')" 1
  check "says why it does not retry" stderr_has "failed less than 10 minutes ago"
  check "still runs Bazel" args_are build //x
  EXTRA_ENV=(STUB_CARGO_LOG="$T/cargo.log" STUB_CLONESTAGE="$helper_bin" CLONESTAGE_REBUILD=1)
  launch build //x
  check "CLONESTAGE_REBUILD=1 retries" equals "$(wc -l <"$T/install.log" | tr -d ' ')" 2
  check "and then uses the helper" args_are @RC build //x
}

test_per_version_home_comes_first() {
  # A logging helper in the per-version home, the plain helper on PATH.
  local home_bin="$T/data/clonestage/$version/bin"
  link_helper "$T/real/clonestage"
  mkdir -p "$home_bin"
  printf '#!/bin/sh\necho home >>"%s"\nexec "%s" "$@"\n' "$T/which" "$T/real/clonestage" >"$home_bin/clonestage"
  chmod +x "$home_bin/clonestage"
  EXTRA_ENV=(XDG_DATA_HOME="$T/data")
  launch build //x
  check "rc added" args_are @RC build //x
  check "the per-version home's helper was used (XDG_DATA_HOME)" test -s "$T/which"
  rm -f "$T/which"
  EXTRA_ENV=(XDG_DATA_HOME="relative/data")
  mkdir -p "$T/home/.local/share/clonestage/$version"
  cp -r "$home_bin" "$T/home/.local/share/clonestage/$version/"
  launch build //x
  check "a relative XDG_DATA_HOME is ignored: ~/.local/share" test -s "$T/which"
  check "rc added" args_are @RC build //x
}

# One definition of the per-version home (rust/cli/src/dirs.rs) and its few lines of sh in
# the shim: what `clonestage self-install` installs, the shim finds (the helper is nowhere else).
test_self_install_puts_the_helper_where_the_shim_looks() {
  rm "$T/bin/clonestage" "$T/bin/clonestage-spawn"
  printf '#!/bin/sh\nexit 0\n' >"$T/spawn"
  chmod +x "$T/spawn"
  local xdg
  for xdg in "" "$T/data" "relative/data"; do
    rm -rf "$T/home/.local" "$T/data"
    (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" ${xdg:+XDG_DATA_HOME="$xdg"} \
      "$helper_bin" self-install --spawn "$T/spawn") >"$T/installed" 2>&1
    EXTRA_ENV=(${xdg:+XDG_DATA_HOME="$xdg"})
    launch build //x
    check "XDG_DATA_HOME='$xdg': the shim found what self-install put in $(cat "$T/installed")" args_are @RC build //x
    stop_servers
  done
}

test_server_of_another_version_is_restarted_with_ours() {
  start_server
  local old
  old="$(server_pid)"
  echo "0.0.9" >"$T/cache/server/version" # as a server of another release writes it
  launch build //x
  check "exit 0" equals "$RC" 0
  check "says so" stderr_has "the clonestage server on $T/cache is version 0.0.9, this launcher's helper ("
  check "names ours" stderr_has ") is $version: restarting it with ours"
  check "in one line" equals "$(stderr_lines)" 1
  check "stopped it cleanly" bash -c "! kill -0 $old 2>/dev/null"
  check "ours runs" equals "$(cat "$T/cache/server/version" 2>/dev/null)" "$version"
  check "a new server" test "$(server_pid)" != "$old"
  check "rc added" args_are @RC build //x
  launch build //x
  check "then the fast path: quiet" stderr_empty
}

test_a_server_of_another_version_that_will_not_stop() {
  fake_server "" 1 # no version file: a server from before it
  EXTRA_ENV=(CLONESTAGE_STOP_TIMEOUT=1)
  launch build //x
  check "exit 0 (Bazel ran)" equals "$RC" 0
  check "no rc: not the other version's server" args_are build //x
  check "names the unknown version" stderr_has "is version unknown (it wrote no version file)"
  check "says it could not stop it, and why" stderr_has "could not stop the server of version unknown (it wrote no version file) on $T/cache: the server (pid $(server_pid)) got SIGTERM but still runs after 1s; running Bazel without the clonestage executor"
}

test_digest_function_other_than_sha256_stands_aside() {
  start_server
  launch --digest_function=blake3 build //x
  check "blake3: untouched" args_are --digest_function=blake3 build //x
  check "blake3: says why" stderr_has "--digest_function=blake3: the clonestage server hashes with SHA-256 only, so this command runs without clonestage"
  check "in one line" equals "$(stderr_lines)" 1
  launch --digest_function BLAKE3 test //x
  check "unary form: untouched" args_are --digest_function BLAKE3 test //x
  check "unary form: says why" stderr_has "--digest_function=BLAKE3"
  launch --digest_function=SHA256 build //x
  check "sha256: rc added" args_are --digest_function=SHA256 @RC build //x
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
  check "the command line wins over the rc" args_are --digest_function=sha256 @RC build //x
  printf 'startup --digest_function=blake3\n' >"$T/ws/.bazelrc"
  printf 'startup --digest_function=SHA256\n' >"$T/home/.bazelrc"
  launch build //x
  check "~/.bazelrc (read after the workspace's) wins" args_are @RC build //x
  rm "$T/ws/.bazelrc"
  printf 'startup --digest_function=blake3\n' >"$T/home/.bazelrc"
  launch build //x
  check "~/.bazelrc blake3: untouched" args_are build //x
  check "~/.bazelrc blake3: says where" stderr_has "(a startup line in $T/home/.bazelrc)"
  launch --nohome_rc build //x
  check "--nohome_rc: ~/.bazelrc not read" args_are --nohome_rc @RC build //x
}

test_ignore_all_rc_files_stands_aside() {
  start_server
  local mode
  for mode in 0 1; do
    EXTRA_ENV=(CLONESTAGE_TCP=$mode)
    launch --ignore_all_rc_files build //x
    check "CLONESTAGE_TCP=$mode: untouched" args_are --ignore_all_rc_files build //x
    check "CLONESTAGE_TCP=$mode: says why in one line" stderr_has "--ignore_all_rc_files: clonestage's executor and settings travel only in an rc file"
  done
}

test_symlinked_launcher_finds_its_checkout() {
  # examples/*/tools/bazel are symlinks to the checkout's tools/bazel.
  rm "$T/bin/clonestage"
  mkdir -p "$T/checkout/tools" "$T/ex/tools"
  cp "$launcher" "$T/checkout/tools/bazel"
  link_helper "$T/checkout/rust/target/release/clonestage"
  ln -s ../../checkout/tools/bazel "$T/ex/tools/bazel"
  mark_checkout "$T/checkout"
  (cd "$T/ex" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
    BAZEL_REAL="$REAL" STUB_BAZEL_OUT="$T/bazel-args" tools/bazel build //x) 2>"$T/stderr"
  ERR="$(cat "$T/stderr")"
  check "checkout's helper used" args_are @RC build //x
}

test_explicit_executor_wins() {
  # Another executor named on the command line: nothing added, so the token header never
  # reaches it.
  start_server
  EXTRA_ENV=(CLONESTAGE_TCP=1)
  launch build --remote_executor=grpcs://rbe.example:443 //x
  check "executor flag: untouched" args_are build --remote_executor=grpcs://rbe.example:443 //x
  check "and says so in one line" stderr_has "--remote_executor is on the command line: adding no clonestage executor"
  launch test --remote_cache grpc://cache:9092 //x
  check "cache flag: untouched" args_are test --remote_cache grpc://cache:9092 //x
  launch run //tool -- --remote_executor=x
  check "after --: still ours" args_are @RC run //tool -- --remote_executor=x
}

test_disable() {
  start_server
  printf '#!/bin/sh\necho ran >>"%s"\nexec "%s" "$@"\n' "$T/which" "$T/bin/clonestage" >"$T/logged"
  chmod +x "$T/logged"
  EXTRA_ENV=(CLONESTAGE_DISABLE=1 CLONESTAGE_BIN="$T/logged")
  launch build //x
  check "untouched" args_are build //x
  check "helper not run" no_file "$T/which"
}

test_finds_real_bazel_on_path_without_looping() {
  start_server
  mkdir -p "$T/front"
  ln -s "$T/ws/tools/bazel" "$T/front/bazel" # the launcher itself first on PATH
  cp "$stubs/bazel" "$T/bin/bazel"
  (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/front:$T/bin:$SYS_PATH" CLONESTAGE_CACHE="$T/cache" \
    STUB_BAZEL_OUT="$T/bazel-args" USE_BAZEL_VERSION=7.4.1 "$T/front/bazel" build //x) 2>"$T/stderr"
  ERR="$(cat "$T/stderr")"
  check "ran the stub with the rc" args_are @RC build //x
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
  check "the rc exactly once" args_are @RC build //x
}

# One definition of the cache directory (rust/cli/src/dirs.rs): with XDG_CACHE_HOME set and
# no CLONESTAGE_CACHE, the launcher's server and `clonestage status` name the same cache.
test_xdg_cache_home_is_the_cache_of_status_and_launcher() {
  (cd "$T/ws" && /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" XDG_CACHE_HOME="$T/xdg" \
    BAZEL_REAL="$REAL" STUB_BAZEL_OUT="$T/bazel-args" "$T/ws/tools/bazel" build //x) 2>"$T/stderr"
  ERR="$(cat "$T/stderr")"
  check "a server on \$XDG_CACHE_HOME/clonestage" alive "$(server_pid "$T/xdg/clonestage")"
  check "none on ~/.cache/clonestage" no_file "$T/home/.cache/clonestage"
  check "Bazel got that server's rc" grep -q "^--bazelrc=$T/xdg/clonestage/launcher/bazelrc/" "$T/bazel-args"
  /usr/bin/env -i HOME="$T/home" PATH="$T/bin:$SYS_PATH" XDG_CACHE_HOME="$T/xdg" \
    "$helper_bin" status >"$T/status" 2>&1
  check "clonestage status: up (exit 0)" equals "$?" 0
  check "clonestage status names that cache" grep -q "$T/xdg/clonestage" "$T/status"
}

test_the_shim_is_posix_sh() {
  check "dash -n accepts it" dash -n "$launcher"
  check "at most 120 lines" less_than "$(wc -l <"$launcher")" 121
  check "#!/bin/sh" equals "$(head -n 1 "$launcher")" "#!/bin/sh"
  if command -v shellcheck >/dev/null; then
    check "shellcheck -s sh is clean" shellcheck -s sh "$launcher"
  fi
}
