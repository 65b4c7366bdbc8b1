# shellcheck shell=bash
# tests/perf/lib.sh: helpers shared by overhead.sh and large.sh (sourced, not run).
#
# Both benchmarks start their own `clonestage serve` on a private cache
# directory (never the user's), run Bazel through the workspace's launcher
# (tools/bazel) so the clonestage runs see what a user sees, and stop the server
# on exit. Timings are wall clock around whole `bazel build` commands, from
# before the launcher starts to after Bazel exits.
#
# Environment (all optional):
#   CLONESTAGE_BIN     the helper (default: <checkout>/rust/target/release/clonestage,
#                      built with cargo when missing)
#   CLONESTAGE_SPAWN   the spawn wrapper the server runs (default: the server's own
#                      lookup: beside the helper, then PATH)
#   PERF_DIR           where the cache (PERF_DIR/cache) and logs go (default: a new
#                      /var/tmp/clonestage-perf.XXXXXX, removed at exit; a given
#                      one is kept, and so is the default one with PERF_KEEP=1)

perf_checkout="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
perf_bin="${CLONESTAGE_BIN:-$perf_checkout/rust/target/release/clonestage}"
perf_server_pid=""
perf_dir=""
perf_cache=""
perf_own_dir=0

perf_say() { printf '%s: %s\n' "${perf_name:-perf}" "$*" >&2; }
perf_die() {
  perf_say "error: $*"
  exit 1
}

# The ROUNDS argument, checked: prints it, or dies naming what is wrong.
perf_rounds() {
  case "$1" in
    '' | *[!0-9]*) perf_die "ROUNDS must be a number, not '$1'" ;;
  esac
  [ "$1" -ge 1 ] || perf_die "ROUNDS must be at least 1"
  echo "$1"
}

# Milliseconds since the epoch.
perf_now_ms() { echo $(($(date +%s%N) / 1000000)); }

# Median and minimum of numbers given as arguments (integers or decimals).
perf_median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.1f\n", (a[NR/2]+a[NR/2+1])/2}'; }
perf_min() { printf '%s\n' "$@" | sort -g | head -n 1; }

# The machine's state, for the report header.
perf_machine() {
  local load
  read -r load _ </proc/loadavg
  echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(awk '/MemTotal/ {printf "%.0f GB", $2/1048576}' /proc/meminfo) RAM, shared with other engineers' builds"
  echo "load average at start: $load (1 min); other bazel servers running: $(pgrep -c -f 'bazel\(' || true)"
  echo "filesystem of the cache: $(stat -f -c %T "$perf_cache") ($(df -P "$perf_cache" | awk 'NR==2 {print $1}'))"
  echo "bazel: $(bazel --version 2>/dev/null | head -n 1) (Debian 4.2.3); helper: $perf_bin"
}

perf_load_now() {
  local load
  read -r load _ </proc/loadavg
  echo "$load"
}

perf_helper() {
  if ! [ -x "$perf_bin" ]; then
    perf_say "building the helper: cargo build --release --bin clonestage"
    # From the checkout: cargo reads its .cargo/config.toml (the h2 [patch]) from the working directory.
    (cd "$perf_checkout" && cargo build --release --manifest-path "$perf_checkout/rust/Cargo.toml" --bin clonestage) >&2 ||
      perf_die "cargo build failed"
  fi
}

perf_stop_pid() { # SIGTERM to a server started here, then up to 10 s for it to end
  if [ -n "$1" ] && kill -0 "$1" 2>/dev/null; then
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 100); do
      kill -0 "$1" 2>/dev/null || break
      sleep 0.1
    done
  fi
}

perf_stop_server() {
  perf_stop_pid "$perf_server_pid"
  perf_server_pid=""
}

# Another `clonestage serve`, of helper BIN on cache CACHE (made if missing), logging to LOG,
# with the KEY=value environment words that follow; ready when this returns, stopped at exit.
perf_other_pids=()
perf_serve_other() { # BIN CACHE LOG [KEY=value...]
  local bin="$1" cache="$2" log="$3" pid
  shift 3
  mkdir -p "$cache"
  if "$bin" --cache "$cache" address >/dev/null 2>&1; then
    perf_die "a clonestage server already runs on $cache; use another PERF_DIR"
  fi
  env "$@" setsid "$bin" --cache "$cache" serve </dev/null >"$log" 2>&1 &
  pid=$!
  perf_other_pids+=("$pid")
  for _ in $(seq 150); do
    "$bin" --cache "$cache" address >/dev/null 2>&1 && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  "$bin" --cache "$cache" address >/dev/null 2>&1 || perf_die "the server on $cache did not start (log: $log)"
  perf_say "another server up (pid $pid, $bin, cache $cache${*:+, $*})"
}

perf_cleanup() {
  perf_stop_server
  local pid
  for pid in "${perf_other_pids[@]}"; do perf_stop_pid "$pid"; done
  if [ "$perf_own_dir" = 1 ] && [ "${PERF_KEEP:-0}" != 1 ] && [ -n "$perf_dir" ]; then
    chmod -R u+w "$perf_dir" 2>/dev/null || true
    rm -rf "$perf_dir"
  fi
}

# Start `clonestage serve` on the cache and wait until it answers.
perf_start_server() {
  if [ -n "${PERF_DIR:-}" ]; then
    perf_dir="$PERF_DIR"
    mkdir -p "$perf_dir"
  else
    perf_dir="$(mktemp -d /var/tmp/clonestage-perf.XXXXXX)"
    perf_own_dir=1
  fi
  perf_cache="$perf_dir/cache"
  mkdir -p "$perf_cache"
  trap perf_cleanup EXIT
  trap 'exit 130' INT TERM
  export CLONESTAGE_CACHE="$perf_cache"
  if "$perf_bin" --cache "$perf_cache" address >/dev/null 2>&1; then
    perf_die "a clonestage server already runs on $perf_cache; use another PERF_DIR"
  fi
  setsid "$perf_bin" --cache "$perf_cache" serve </dev/null >"$perf_dir/serve.log" 2>&1 &
  perf_server_pid=$!

  for _ in $(seq 150); do
    if "$perf_bin" --cache "$perf_cache" address >/dev/null 2>&1; then
      perf_say "server up (pid $perf_server_pid, cache $perf_cache)"
      return 0
    fi
    kill -0 "$perf_server_pid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$perf_dir/serve.log" >&2
  perf_die "clonestage serve did not start"
}

# clonestage stats --json of the benchmark's cache, once the server's counters
# have settled (it writes them off the request path, a few ms after a build).
perf_stats() {
  local a b
  a="$("$perf_bin" --cache "$perf_cache" stats --json)"
  for _ in $(seq 20); do
    sleep 0.1
    b="$("$perf_bin" --cache "$perf_cache" stats --json)"
    [ "$a" = "$b" ] && break
    a="$b"
  done
  printf '%s\n' "$a"
}

# Value of a numeric key in a stats JSON object (0 when absent).
perf_key() { # JSON KEY
  local v
  v="$(printf '%s' "$1" | grep -o "\"$2\":[0-9]*" | head -n 1 | cut -d: -f2)"
  echo "${v:-0}"
}
