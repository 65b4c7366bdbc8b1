#!/usr/bin/env bash
# tests/e2e/run.sh: end-to-end checks of clonestage under the Bazel CI runs
# (Debian's 4.2.3), driven the way a user drives it: `bazel` runs the
# workspace's tools/bazel launcher, which starts `clonestage serve` and adds
# the executor flags; the workspaces import strategy/clonestage.bazelrc.
#
#   1. tests/e2e, `bazel test --config=clonestage --config=staged //...`:
#      passes, every spawn ran remotely, `clonestage stats` counted them and
#      the staging method this filesystem should use;
#   2. the failing and the timing-out targets fail as they should, and actions
#      tagged no-remote-exec / no-remote stay local;
#   3. `bazel clean` and the same build again: every action is an action
#      cache hit, none executed;
#   4. the same workspace with --spawn_strategy=local (launcher bypassed);
#   5. the server killed (SIGKILL) mid-action: Bazel falls back to local as the
#      bazelrc configures, nothing hangs, no action process outlives the
#      server; the launcher restarts it, the next build is green and
#      `clonestage verify` is clean;
#   6. examples/swiftlike at CI scale through clonestage and locally.
#
# Run from anywhere (CI: tests/run.sh from the repo root). Prints PASS/FAIL per
# check and "N passed, M failed" last; exit status 1 on any failure.
# Environment: TMPDIR (cache and logs go there), E2E_KEEP=1 keeps both.
# Needs: cargo, bazel (4.2.3), coreutils' timeout. Runs one Bazel command at a
# time, --jobs=2.

set -u -o pipefail

start_time=$SECONDS
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
e2e="$root/tests/e2e"
swiftlike="$root/examples/swiftlike"
cs="$root/rust/target/release/clonestage"
JOBS=--jobs=2

# The launcher must find everything the default way: no overrides from the caller.
unset CLONESTAGE_DISABLE CLONESTAGE_BIN CLONESTAGE_SPAWN CLONESTAGE_TCP CLONESTAGE_VERBOSE
cache="$(mktemp -d "${TMPDIR:-/tmp}/clonestage-e2e-cache.XXXXXX")"
cache="$(cd "$cache" && pwd -P)"
logs="$(mktemp -d "${TMPDIR:-/tmp}/clonestage-e2e-logs.XXXXXX")"
export CLONESTAGE_CACHE="$cache"
# The launcher looks in the per-version home (<data>/clonestage/<version>/bin) before the
# checkout: an install there must not shadow the build under test.
export XDG_DATA_HOME="$logs/no-install"

# shellcheck source=tests/lib/report.sh
source "$root/tests/lib/report.sh"
# shellcheck source=tests/lib/bazel.sh
source "$root/tests/lib/bazel.sh"
bg_pid=""

# --- the server ------------------------------------------------------------------------

server_pid() { # the pid of the server for $cache, or nothing (checked in /proc, not just the lock file)
  local pid
  pid="$(tr -dc 0-9 2>/dev/null <"$cache/server/lock")"
  [ -n "$pid" ] || return 1
  tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$cache serve" || return 1
  echo "$pid"
}

stop_server() {
  local pid
  pid="$(server_pid)" || return 0
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  say "run.sh: server $pid ignored SIGTERM for 10 s; SIGKILL"
  kill -KILL "$pid" 2>/dev/null
}

cleanup() {
  local rc=$?
  if [ -n "$bg_pid" ]; then
    kill "$bg_pid" 2>/dev/null
    wait "$bg_pid" 2>/dev/null
  fi
  stop_server
  if [ "$failed" -gt 0 ] || [ "${E2E_KEEP:-0}" = 1 ] || [ "$rc" -ne 0 ]; then
    say "run.sh: kept the cache $cache and the logs $logs"
  else
    rm -rf "$cache" "$logs"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- figures ----------------------------------------------------------------------------

snap() { # snap NAME: the server's counters now, into $logs/NAME.json
  "$cs" --cache "$cache" stats --json >"$logs/$1.json" 2>"$logs/$1.err" || : >"$logs/$1.json"
}
# The server updates its counters just after it answers: an "after" snapshot is
# taken once two reads 0.2 s apart agree (at most 5 s).
snap_settled() {
  snap "$1"
  for _ in $(seq 1 25); do
    sleep 0.2
    cp "$logs/$1.json" "$logs/$1.prev"
    snap "$1"
    cmp -s "$logs/$1.json" "$logs/$1.prev" && return 0
  done
  say "run.sh: the server's counters kept changing for 5 s ($1)"
}
stat_of() { # stat_of NAME KEY: a counter of snapshot NAME (0 when absent)
  local v
  v="$(sed -n "s/.*\"$2\"[[:space:]]*:[[:space:]]*\([0-9][0-9]*\).*/\1/p" "$logs/$1.json" | head -n 1)"
  echo "${v:-0}"
}
delta() { # delta FROM TO KEY
  echo $(($(stat_of "$2" "$3") - $(stat_of "$1" "$3")))
}

# bz DIR LOG SECONDS ARGS...: one Bazel command in DIR through /usr/bin/bazel (and
# so the launcher, unless CLONESTAGE_DISABLE=1 is in the environment), bounded.
bz() {
  local dir="$1" log="$2" limit="$3"
  shift 3
  (cd "$dir" && timeout -k 10 "$limit" bazel "$@") >"$log" 2>&1
}

# Which staging method the cache's filesystem should use.
expected_method() {
  case "$(stat -f -c %T "$cache" 2>/dev/null)" in
    ext2/ext3 | ext4 | tmpfs) echo hardlink ;;
    xfs) echo reflink ;;
    btrfs) echo reflink ;;
    apfs) echo clonefile ;;
    *) echo "" ;;
  esac
}
methods_line() { # per-method figures between two snapshots, for the logs
  local m out=""
  for m in clonefile reflink snapshot hardlink copy empty fallbacks; do
    out="$out $m=$(delta "$1" "$2" "$m")"
  done
  echo "${out# }"
}

# Processes of the slow action started by the server: they carry the nonce in
# their environment and run under the cache's work directory.
server_action_pids() {
  local d pid cwd
  for d in /proc/[0-9]*; do
    pid="${d#/proc/}"
    tr '\0' '\n' 2>/dev/null <"$d/environ" | grep -qx "CLONESTAGE_E2E_NONCE=$1" || continue
    cwd="$(readlink "$d/cwd" 2>/dev/null)" || continue
    case "$cwd" in
      "$cache"/work/*) echo "$pid" ;;
    esac
  done
}

abort_setup() {
  say "run.sh: setup failed; no end-to-end check can run"
  say "$passed passed, $failed failed"
  exit 1
}

say "run.sh: cache $cache, logs $logs"

# --- setup: the helper and the spawn wrapper ------------------------------------------------

# From the checkout: cargo reads its .cargo/config.toml (the h2 [patch]) from the working directory.
if (cd "$root" && cargo build --release --manifest-path "$root/rust/Cargo.toml" --bin clonestage) >"$logs/cargo.log" 2>&1 &&
  [ -x "$cs" ]; then
  pass "setup: cargo build --release --bin clonestage"
else
  fail "setup: cargo build --release --bin clonestage" "$(tail_of "$logs/cargo.log")"
  abort_setup
fi

# Built by Bazel in the root workspace (the artifact //cc's googletest suite tests),
# then put beside the helper, where `clonestage serve` looks for it. Replaced by
# rename: a running server keeps the inode it has.
spawn_ok=0
if CLONESTAGE_DISABLE=1 bz "$root" "$logs/spawn.log" 300 build "$JOBS" //:spawn; then
  bin="$(cd "$root" && CLONESTAGE_DISABLE=1 bazel info bazel-bin 2>/dev/null)"
  if [ -x "$bin/cc/clonestage-spawn" ] &&
    install -m 0755 "$bin/cc/clonestage-spawn" "$root/rust/target/release/.clonestage-spawn.$$" &&
    mv -f "$root/rust/target/release/.clonestage-spawn.$$" "$root/rust/target/release/clonestage-spawn"; then
    spawn_ok=1
  fi
fi
if [ "$spawn_ok" = 1 ]; then
  pass "setup: bazel build //:spawn, installed as rust/target/release/clonestage-spawn"
else
  fail "setup: bazel build //:spawn, installed as rust/target/release/clonestage-spawn" "$(tail_of "$logs/spawn.log")"
  abort_setup
fi

method="$(expected_method)"

# --- 1. tests/e2e through clonestage --------------------------------------------------------

CLONESTAGE_DISABLE=1 bz "$e2e" "$logs/e2e-clean1.log" 120 clean
snap e2e-before
name="e2e: bazel test --config=clonestage --config=staged //... passes"
if bz "$e2e" "$logs/e2e-clonestage.log" 300 test "$JOBS" --config=clonestage --config=staged //...; then
  pass "$name"
else
  fail "$name" "$(tail_of "$logs/e2e-clonestage.log" 25)"
fi
snap_settled e2e-after
e2e_remote="$(spawns "$logs/e2e-clonestage.log" remote)"
e2e_actions="$(delta e2e-before e2e-after actions)"
others="$(other_spawns "$logs/e2e-clonestage.log")"
name="e2e: every spawn ran remotely and clonestage executed each one"
if [ -z "$(server_pid)" ]; then
  fail "$name" "no clonestage server runs for $cache: the launcher did not start one" \
    "$(tail_of "$cache/launcher/serve.log" 5)"
elif [ "$e2e_remote" -gt 0 ] && [ -z "$others" ] && [ "$e2e_actions" -ge "$e2e_remote" ] &&
  [ "$(delta e2e-before e2e-after action_errors)" = 0 ]; then
  pass "$name ($(summary_of "$logs/e2e-clonestage.log" | sed 's/^INFO: //') server actions: $e2e_actions)"
else
  fail "$name" "Bazel: $(summary_of "$logs/e2e-clonestage.log")" \
    "server: actions +$e2e_actions, action_errors +$(delta e2e-before e2e-after action_errors); spawns not remote: ${others:-none}"
fi
name="e2e: inputs staged by ${method:-some method} ($(stat -f -c %T "$cache") cache)"
staged_files=0
for m in clonefile reflink snapshot hardlink copy; do
  staged_files=$((staged_files + $(delta e2e-before e2e-after "$m")))
done
if [ "$staged_files" -gt 0 ] && { [ -z "$method" ] || [ "$(delta e2e-before e2e-after "$method")" -gt 0 ]; } &&
  [ "$(delta e2e-before e2e-after stage_failures)" = 0 ] && [ "$(delta e2e-before e2e-after tampered)" = 0 ]; then
  pass "$name: $(methods_line e2e-before e2e-after)"
else
  fail "$name" "$(methods_line e2e-before e2e-after) stage_failures=+$(delta e2e-before e2e-after stage_failures) tampered=+$(delta e2e-before e2e-after tampered)"
fi
name="e2e: //staged:check found its inputs as regular read-only files, not symlinks"
report="$e2e/bazel-bin/staged/check_report.txt"
if grep -qE '^staged: [0-9]+ input\(s\) checked$' "$report" 2>/dev/null &&
  ! grep -qE '^input (symlink|directory|missing) ' "$report"; then
  pass "$name ($(grep -E '^staged: ' "$report"))"
else
  fail "$name" "$(tail_of "$report" 20)"
fi
name="e2e: undeclared test outputs reached bazel-testlogs"
outdir="$e2e/bazel-testlogs/undeclared/writes_outputs_test/test.outputs"
if [ -f "$outdir/outputs.zip" ]; then
  if command -v unzip >/dev/null 2>&1; then
    listing="$(unzip -Z1 "$outdir/outputs.zip" 2>&1)"
  else # names are stored uncompressed in a zip's directory
    listing="$(grep -aoE 'report\.txt|sub/nested\.txt' "$outdir/outputs.zip" | sort -u)"
  fi
  if grep -qx report.txt <<<"$listing" && grep -qx sub/nested.txt <<<"$listing"; then
    pass "$name (outputs.zip holds report.txt and sub/nested.txt)"
  else
    fail "$name" "outputs.zip lacks report.txt or sub/nested.txt:" "$listing"
  fi
elif [ -f "$outdir/report.txt" ] && [ -f "$outdir/sub/nested.txt" ]; then
  pass "$name (test.outputs/report.txt and sub/nested.txt)"
else
  fail "$name" "no outputs.zip and no report.txt in $outdir" "$(find "$outdir" 2>&1 | head -n 10)"
fi

name="e2e: the second compile loaded the module the first built, in the shared module cache"
first_rep="$(cat "$e2e/bazel-bin/modcache/first.txt" 2>&1)"
second_rep="$(cat "$e2e/bazel-bin/modcache/second.txt" 2>&1)"
linked="$(delta e2e-before e2e-after shared_dirs_linked)"
if [ "$first_rep" = "first built the module" ] && [ "$second_rep" = "second loaded the module built by first" ] &&
  [ "$linked" -ge 2 ]; then
  pass "$name (shared_dirs_linked +$linked)"
else
  fail "$name" "first: $first_rep" "second: $second_rep" "server shared_dirs_linked +$linked (want >= 2)"
fi

# --- 2. failures through clonestage ----------------------------------------------------------

snap fail-before
bz "$e2e" "$logs/e2e-fails.log" 180 build "$JOBS" --config=clonestage //expected:fails
rc=$?
snap_settled fail-after
name="e2e: a failing action fails through clonestage with its exit code and message"
if [ "$rc" = 1 ] && grep -q 'Executing genrule //expected:fails failed: (Exit 3)' "$logs/e2e-fails.log" &&
  grep -qx 'clonestage-e2e: this action fails on purpose' "$logs/e2e-fails.log" &&
  [ "$(delta fail-before fail-after action_failures)" -ge 1 ]; then
  pass "$name"
else
  fail "$name" "bazel exit $rc (want 1), server action_failures +$(delta fail-before fail-after action_failures)" \
    "$(tail_of "$logs/e2e-fails.log")"
fi

snap timeout-before
t0=$SECONDS
bz "$e2e" "$logs/e2e-timeout.log" 180 test "$JOBS" --config=clonestage --test_timeout=5 //expected:times_out_test
rc=$?
took=$((SECONDS - t0))
snap_settled timeout-after
name="e2e: a test past --test_timeout=5 is reported TIMEOUT and killed by clonestage"
if [ "$rc" = 3 ] && grep -qE '^//expected:times_out_test +TIMEOUT' "$logs/e2e-timeout.log" &&
  [ "$(delta timeout-before timeout-after action_timeouts)" -ge 1 ] && [ "$took" -lt 60 ]; then
  pass "$name (${took}s)"
else
  fail "$name" "bazel exit $rc (want 3) after ${took}s, server action_timeouts +$(delta timeout-before timeout-after action_timeouts)" \
    "$(tail_of "$logs/e2e-timeout.log")"
fi

nonce_t="t$$-$RANDOM$RANDOM"
snap tags-before
name="e2e: under --config=clonestage, no-remote-exec and no-remote actions run locally"
if bz "$e2e" "$logs/e2e-tags.log" 180 build "$JOBS" --config=clonestage --action_env=CLONESTAGE_E2E_NONCE="$nonce_t" \
  //expected:tagged_no_remote_exec //expected:tagged_no_remote; then
  snap_settled tags-after
  # no-remote-exec: run here, result uploaded to clonestage's action cache;
  # no-remote: run here, clonestage not involved at all.
  if [ "$(spawns "$logs/e2e-tags.log" local)" = 2 ] && [ "$(spawns "$logs/e2e-tags.log" remote)" = 0 ] &&
    [ "$(delta tags-before tags-after actions)" = 0 ] && [ "$(delta tags-before tags-after action_cache_updates)" = 1 ]; then
    pass "$name (2 local; 1 result uploaded to the action cache)"
  else
    fail "$name" "Bazel: $(summary_of "$logs/e2e-tags.log")" \
      "server: actions +$(delta tags-before tags-after actions), action_cache_updates +$(delta tags-before tags-after action_cache_updates) (want 0 and 1)"
  fi
else
  snap_settled tags-after
  fail "$name" "$(tail_of "$logs/e2e-tags.log")"
fi

# --- 3. bazel clean, then the action cache ------------------------------------------------------

CLONESTAGE_DISABLE=1 bz "$e2e" "$logs/e2e-clean2.log" 120 clean
snap ac-before
name="e2e: after bazel clean the rebuild is served from clonestage's action cache"
if bz "$e2e" "$logs/e2e-cached.log" 300 test "$JOBS" --config=clonestage --config=staged //...; then
  snap_settled ac-after
  hits="$(spawns "$logs/e2e-cached.log" "remote cache hit")"
  if [ "$hits" -ge "$e2e_remote" ] && [ "$hits" -gt 0 ] && [ "$(spawns "$logs/e2e-cached.log" remote)" = 0 ] &&
    [ -z "$(other_spawns "$logs/e2e-cached.log")" ] &&
    [ "$(delta ac-before ac-after actions)" = 0 ] && [ "$(delta ac-before ac-after action_cache_hits)" -ge "$hits" ]; then
    pass "$name ($hits remote cache hits, server action_cache_hits +$(delta ac-before ac-after action_cache_hits), 0 actions run)"
  else
    fail "$name" "Bazel: $(summary_of "$logs/e2e-cached.log") (first build: $e2e_remote remote)" \
      "server: actions +$(delta ac-before ac-after actions), action_cache_hits +$(delta ac-before ac-after action_cache_hits)"
  fi
else
  snap_settled ac-after
  fail "$name" "$(tail_of "$logs/e2e-cached.log" 25)"
fi

# --- 4. the same workspace, locally ----------------------------------------------------------------

CLONESTAGE_DISABLE=1 bz "$e2e" "$logs/e2e-clean3.log" 120 clean
snap local-before
name="e2e: the same workspace passes with --spawn_strategy=local"
if CLONESTAGE_DISABLE=1 bz "$e2e" "$logs/e2e-local.log" 300 test "$JOBS" --spawn_strategy=local //...; then
  snap_settled local-after
  if [ "$(spawns "$logs/e2e-local.log" local)" -gt 0 ] && [ "$(spawns "$logs/e2e-local.log" remote)" = 0 ] &&
    [ "$(delta local-before local-after actions)" = 0 ]; then
    pass "$name ($(summary_of "$logs/e2e-local.log" | sed 's/^INFO: //'))"
  else
    fail "$name" "Bazel: $(summary_of "$logs/e2e-local.log"), server actions +$(delta local-before local-after actions)"
  fi
else
  fail "$name" "$(tail_of "$logs/e2e-local.log" 25)"
fi
name="e2e: the staging checks fail under --spawn_strategy=local, as intended"
CLONESTAGE_DISABLE=1 bz "$e2e" "$logs/e2e-local-staged.log" 180 build "$JOBS" --spawn_strategy=local --config=staged //staged:check
rc=$?
if [ "$rc" = 1 ] && grep -q 'check_staged: CLONESTAGE_EXPECT_STAGED=1 but' "$logs/e2e-local-staged.log"; then
  pass "$name"
else
  fail "$name" "bazel exit $rc (want 1)" "$(tail_of "$logs/e2e-local-staged.log")"
fi

# --- 5. the server killed mid-build ------------------------------------------------------------------

nonce="k$$-$RANDOM$RANDOM"
kill_log="$logs/kill-build.log"
(cd "$e2e" && exec timeout -k 10 240 bazel build "$JOBS" --config=clonestage \
  --action_env=CLONESTAGE_E2E_NONCE="$nonce" //expected:slow) >"$kill_log" 2>&1 &
bg_pid=$!
old_pid=""
action_running=0
for _ in $(seq 1 600); do # up to 60 s for the slow action to be running under the server
  if [ -n "$(server_action_pids "$nonce")" ]; then
    action_running=1
    break
  fi
  kill -0 "$bg_pid" 2>/dev/null || break
  sleep 0.1
done
name="kill: server SIGKILLed mid-action; Bazel falls back to local as configured, no hang"
orphans=""
if [ "$action_running" = 1 ] && old_pid="$(server_pid)"; then
  kill -KILL "$old_pid"
  killed_at=$SECONDS
  # No action may outlive its server: the wrapper dies with it and ends its group
  # (SIGTERM, then SIGKILL after the 5 s kill delay).
  for _ in $(seq 1 150); do
    orphans="$(server_action_pids "$nonce" | tr '\n' ' ')"
    [ -z "$orphans" ] && break
    sleep 0.1
  done
  wait "$bg_pid"
  rc=$?
  bg_pid=""
  took=$((SECONDS - killed_at))
  if [ "$rc" = 0 ] && [ "$(spawns "$kill_log" local)" -ge 1 ]; then
    pass "$name (server $old_pid killed; build finished ${took}s later: $(summary_of "$kill_log" | sed 's/^INFO: //'))"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    fail "$name" "Bazel still running ${took}s after the server was killed (hang; stopped by timeout)" "$(tail_of "$kill_log")"
  else
    fail "$name" "bazel exit $rc; want 0 with the action rerun locally (--remote_local_fallback)" "$(tail_of "$kill_log")"
  fi
  name="kill: no action process outlives the killed server"
  if [ -z "$orphans" ]; then
    pass "$name"
  else
    fail "$name" "still running 15 s after the server died: $orphans"
    for p in $orphans; do
      say "      | $(tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline")"
    done
  fi
else
  if [ -n "$bg_pid" ]; then
    kill "$bg_pid" 2>/dev/null
    wait "$bg_pid" 2>/dev/null
    bg_pid=""
  fi
  fail "$name" "the slow action never ran under the server (server pid: $(server_pid || echo none))" "$(tail_of "$kill_log")"
  fail "kill: no action process outlives the killed server" "not checked: nothing was killed"
fi

nonce2="r$$-$RANDOM$RANDOM"
snap restart-before
name="kill: the launcher restarts the server and the next build is green, run by the new server"
if bz "$e2e" "$logs/restart.log" 300 test "$JOBS" --config=clonestage --config=staged \
  --action_env=CLONESTAGE_E2E_NONCE="$nonce2" --test_env=CLONESTAGE_E2E_NONCE="$nonce2" //...; then
  snap_settled restart-after
  new_pid="$(server_pid)"
  r_remote="$(spawns "$logs/restart.log" remote)"
  if [ -n "$new_pid" ] && [ "$new_pid" != "$old_pid" ] && [ "$r_remote" -gt 0 ] &&
    [ -z "$(other_spawns "$logs/restart.log")" ] && [ "$(delta restart-before restart-after actions)" -ge "$r_remote" ]; then
    pass "$name (server $new_pid; $(summary_of "$logs/restart.log" | sed 's/^INFO: //'))"
  else
    fail "$name" "server pid ${new_pid:-none} (killed: ${old_pid:-none}); Bazel: $(summary_of "$logs/restart.log")" \
      "server actions +$(delta restart-before restart-after actions)"
  fi
else
  # The launcher's own lines (whether it started a server, or gave up and why) come
  # before Bazel's; the new server's log says how far its start got.
  fail "$name" "launcher: $(grep '^clonestage:' "$logs/restart.log" | head -n 8 | tr '\n' ' ')" \
    "$(tail_of "$logs/restart.log" 25)" "serve.log:" "$(tail_of "$cache/launcher/serve.log" 10)"
fi

# Never silently local: the command after the kill says the server had died, and why.
name="kill: the next command says the server had died (killed by signal 9) and quotes its log"
if grep -q "^clonestage: the clonestage server on $cache had died since the last command (killed by signal 9)" "$logs/restart.log" &&
  grep -q '^clonestage:   | clonestage-launcher: serve exited with status 137' "$logs/restart.log"; then
  pass "$name"
else
  fail "$name" "launcher: $(grep '^clonestage:' "$logs/restart.log" | head -n 8 | tr '\n' ' ')"
fi

# Work dirs some action used: the running server also keeps a few ready for the next actions,
# each holding only an empty stdout and stderr, which do not count.
used_work_dirs() {
  local d
  for d in "$1"/work/* "$1"/work/.[!.]*; do
    [ -e "$d" ] || [ -L "$d" ] || continue
    if [ -d "$d" ] && [ ! -L "$d" ] && [ "$(ls -A "$d" | tr '\n' ' ')" = "stderr stdout " ] &&
      [ -f "$d/stdout" ] && [ ! -s "$d/stdout" ] && [ -f "$d/stderr" ] && [ ! -s "$d/stderr" ]; then
      continue
    fi
    basename "$d"
  done
}

name="kill: clonestage verify finds nothing wrong, and no work dir is left behind"
"$cs" --cache "$cache" verify >"$logs/verify.log" 2>&1
rc=$?
left=""
for _ in $(seq 1 50); do # the server removes work dirs just after it answers
  left="$(used_work_dirs "$cache")"
  [ -z "$left" ] && break
  sleep 0.1
done
if [ "$rc" = 0 ] && [ -z "$left" ]; then
  pass "$name ($(tail -n 1 "$logs/verify.log"))"
else
  fail "$name" "verify exit $rc; left in $cache/work: ${left:-nothing}" "$(tail_of "$logs/verify.log")"
fi

# --- 6. examples/swiftlike at CI scale -------------------------------------------------------------

CLONESTAGE_DISABLE=1 bz "$swiftlike" "$logs/swift-clean1.log" 120 clean
snap swift-before
name="swiftlike: bazel test --config=ci --config=clonestage --config=staged //... through clonestage"
if bz "$swiftlike" "$logs/swift-clonestage.log" 600 test "$JOBS" --config=ci --config=clonestage --config=staged //...; then
  snap_settled swift-after
  s_remote="$(spawns "$logs/swift-clonestage.log" remote)"
  s_actions="$(delta swift-before swift-after actions)"
  s_staged=0
  for m in clonefile reflink snapshot hardlink copy; do
    s_staged=$((s_staged + $(delta swift-before swift-after "$m")))
  done
  # 20 SwiftCompile actions, the compiler's and the test's compiles and links, the test.
  if [ "$s_remote" -ge 20 ] && [ -z "$(other_spawns "$logs/swift-clonestage.log")" ] &&
    [ "$s_actions" -ge "$s_remote" ] && [ "$s_staged" -gt 0 ] &&
    { [ -z "$method" ] || [ "$(delta swift-before swift-after "$method")" -gt 0 ]; } &&
    [ "$(delta swift-before swift-after action_errors)" = 0 ]; then
    pass "$name ($(summary_of "$logs/swift-clonestage.log" | sed 's/^INFO: //') server actions: $s_actions; staged: $(methods_line swift-before swift-after))"
  else
    fail "$name" "Bazel: $(summary_of "$logs/swift-clonestage.log")" \
      "server: actions +$s_actions, $(methods_line swift-before swift-after), action_errors +$(delta swift-before swift-after action_errors)"
  fi
else
  snap_settled swift-after
  fail "$name" "$(tail_of "$logs/swift-clonestage.log" 25)"
fi

# Implicit module builds in that clean build: each compile's Name.modcache says, per module
# it imports, whether it loaded, built or waited for it. 9 modules (8 of the stand-in SDK, and
# CShims, whose map is inside each root and so misses in each of its 4 importers): with the
# shared module cache at most 8 + 4 builds; without it every compile builds its own (~110).
modcache_builds() { # the number of "built" lines in the reports under bazel-bin
  find -L "$swiftlike/bazel-bin/" -name '*.modcache' -exec cat {} + 2>/dev/null | grep -c '^module [A-Za-z]* built '
}
name="swiftlike: through clonestage, each implicit SDK module was built once (shared module cache)"
builds="$(modcache_builds)"
reports="$(find -L "$swiftlike/bazel-bin/" -name '*.modcache' 2>/dev/null | wc -l)"
if [ "$reports" -ge 20 ] && [ "$builds" -ge 8 ] && [ "$builds" -le 12 ]; then
  pass "$name ($builds module builds in $reports compiles)"
else
  fail "$name" "$builds module builds in $reports compiles (want 8 to 12 in at least 20)"
fi

CLONESTAGE_DISABLE=1 bz "$swiftlike" "$logs/swift-clean2.log" 120 clean
snap swift-local-before
name="swiftlike: the same passes with --spawn_strategy=local"
if CLONESTAGE_DISABLE=1 bz "$swiftlike" "$logs/swift-local.log" 600 test "$JOBS" --config=ci --spawn_strategy=local //...; then
  snap_settled swift-local-after
  if [ "$(spawns "$logs/swift-local.log" local)" -ge 20 ] && [ "$(spawns "$logs/swift-local.log" remote)" = 0 ] &&
    [ "$(delta swift-local-before swift-local-after actions)" = 0 ]; then
    pass "$name ($(summary_of "$logs/swift-local.log" | sed 's/^INFO: //'))"
  else
    fail "$name" "Bazel: $(summary_of "$logs/swift-local.log"), server actions +$(delta swift-local-before swift-local-after actions)"
  fi
else
  fail "$name" "$(tail_of "$logs/swift-local.log" 25)"
fi

# --- summary -----------------------------------------------------------------------------------

snap_settled final
say "run.sh: server totals: actions=$(stat_of final actions) action_cache_hits=$(stat_of final action_cache_hits)" \
  "failures=$(stat_of final action_failures) timeouts=$(stat_of final action_timeouts) errors=$(stat_of final action_errors)" \
  "staged files: $(methods_line e2e-before final)"
say "run.sh: finished in $((SECONDS - start_time)) s"
finish
