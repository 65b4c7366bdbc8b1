#!/usr/bin/env bash
# tests/reliability/run.sh: the reliability suite of issue 10. Each part prints one line with
# its figures and PASS/FAIL; docs/reliability.md says what each proves and what it does not.
#
#   kill9    kill -9 of the server at random points of a mixed load (uploads, Execute), then
#            verify, restart, next requests (kill9.py); and kills mid Bazel build (bazel_load.py kill)
#   enospc   a full disk under the cache on a small loop filesystem (enospc.py; root)
#   fuzz     libFuzzer on the engine's tree validator and stager (rust/fuzz, cargo-fuzz)
#   hostile  hostile trees, symlink chains and paths sent to a live server (hostile.py)
#   uploads  abandoned and idle compressed uploads (RSS, temp files), an idle stream and its
#            name, compressed resumption, a message after finish_write (uploads.py; zstandard)
#   race     the write-through race, as root and as a non-root owner (race.py; ext4 mount)
#   two      two Bazel output bases against one server under eviction pressure (bazel_load.py two)
#   lies     a lying team cache: one case per lie of issue 23 (upstream_lies.py, a fake upstream)
#   grace    reads right after Execute under --max-size 1 --evict-every 1 (grace.py)
#
# Usage: bash tests/reliability/run.sh [PART...]   (default: all, in the order above)
# Prints PASS, FAIL or SKIP per part and "N passed, M failed[, K skipped]" last
# (tests/lib/report.sh); exit 1 when any part failed.
#
# Environment (CI uses the defaults; raise them by hand for longer runs):
#   RELIABILITY_KILLS=50 RELIABILITY_BAZEL_KILLS=2 RELIABILITY_FUZZ_SECONDS=45 (per target)
#   RELIABILITY_HOSTILE_SECONDS=45 RELIABILITY_RACE_ROUNDS=3 RELIABILITY_TWO_SECONDS=150
#   RELIABILITY_GRACE_ACTIONS=120
#   RELIABILITY_SEED (one seed for every part), RELIABILITY_KEEP=1 (keep the work dir)
#   RELIABILITY_EVICT=both|gc|serve: eviction pressure by `serve --max-size --evict-every 1`
#     (the server's own eviction) and a `clonestage gc` loop beside it (default: both);
#     RELIABILITY_MAX_SIZE=4M
#   RELIABILITY_PY: a python with grpcio [default: $CLONESTAGE_TOOLS/venv/bin/python]
#   CLONESTAGE_TEST_EXT4: an ext4 mount for the race (CLONESTAGE_REQUIRE_FS=1: fail without it)
# The flags the suite assumes of `clonestage serve` are in reapi.py's CONFIG, in one place.

set -u -o pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
root="$(cd "$here/../.." && pwd -P)"
TOOLS=${CLONESTAGE_TOOLS:-/var/tmp/clonestage-tools}
PY=${RELIABILITY_PY:-$TOOLS/venv/bin/python}
export RELIABILITY_SEED=${RELIABILITY_SEED:-$(date +%s)}
all_parts=(kill9 enospc fuzz hostile uploads race two lies grace)
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=("${all_parts[@]}")

# shellcheck source=tests/lib/report.sh
source "$root/tests/lib/report.sh"
# shellcheck source=tests/lib/build.sh
source "$root/tests/lib/build.sh"
work="$(mktemp -d "${TMPDIR:-/tmp}/clonestage-reliability.XXXXXX")"
chmod 0755 "$work" # the non-root owner of the race must reach its cache below it
cleanup() {
  # Loop mounts first (enospc unmounts its own; this is for an interrupted run).
  grep -F " $work/" /proc/mounts | cut -d' ' -f2 | while read -r m; do umount "$m" 2>/dev/null; done
  if [ "$failed" -gt 0 ] || [ "${RELIABILITY_KEEP:-0}" = 1 ]; then
    say "reliability: kept $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start=$SECONDS
say "reliability: seed $RELIABILITY_SEED, work dir $work"

# --- setup: the helper, the wrapper and a python with grpcio ---------------------------------
bin="$work/bin"
mkdir -p "$bin"
# From the checkout: cargo reads its .cargo/config.toml (the h2 [patch]) from the working directory.
(cd "$root" && need_helper) || die "setup: cargo build --release --bin clonestage"
cp "$root/rust/target/release/clonestage" "$bin/"
cxx_spawn "$root" "$bin/clonestage-spawn" || die "setup: building clonestage-spawn with ${CXX:-g++}"
chmod -R a+rX "$bin"
cs="$bin/clonestage"
spawn="$bin/clonestage-spawn"
"$PY" -c 'import grpc, zstandard' 2>/dev/null ||
  die "setup: a python with grpcio and zstandard" "none at $PY (.ci/install.sh installs it; or set RELIABILITY_PY)"

result() { # result NAME RC: the part's script printed its figures; this counts it
  if [ "$2" = 0 ]; then pass "$1"; else fail "$1" "exit $2 (its lines above say why)"; fi
}
py() { (cd "$here" && nice "$PY" "$@"); }
need_root() { [ "$(id -u)" = 0 ]; }

for part in "${parts[@]}"; do
  t0=$SECONDS
  say ""
  say "--- $part"
  case "$part" in
    kill9)
      mkdir -p "$work/kill9" "$work/kill9-bazel"
      py kill9.py "$cs" "$spawn" "$work/kill9" "${RELIABILITY_KILLS:-50}"
      result "kill9 (load)" $?
      py bazel_load.py "$cs" "$spawn" "$work/kill9-bazel" "$root" kill "${RELIABILITY_BAZEL_KILLS:-2}"
      result "kill9 (bazel)" $?
      ;;
    enospc)
      if need_root; then
        mkdir -p "$work/enospc"
        py enospc.py "$cs" "$spawn" "$work/enospc"
        result enospc $?
      else
        skip enospc "needs root to mount a loop filesystem"
      fi
      ;;
    fuzz)
      bash "$here/fuzz.sh" "${RELIABILITY_FUZZ_SECONDS:-45}" "$work/fuzz"
      result fuzz $?
      ;;
    hostile)
      mkdir -p "$work/hostile"
      py hostile.py "$cs" "$spawn" "$work/hostile" "${RELIABILITY_HOSTILE_SECONDS:-45}"
      result hostile $?
      ;;
    uploads)
      mkdir -p "$work/uploads"
      py uploads.py "$cs" "$spawn" "$work/uploads"
      result uploads $?
      ;;
    race)
      ext4="${CLONESTAGE_TEST_EXT4:-}"
      if [ -z "$ext4" ] || [ ! -d "$ext4" ]; then
        if [ "${CLONESTAGE_REQUIRE_FS:-0}" = 1 ]; then
          fail race "CLONESTAGE_TEST_EXT4 is not an ext4 mount (CLONESTAGE_REQUIRE_FS=1)"
        else
          skip race "no ext4 mount (CLONESTAGE_TEST_EXT4): the race needs hardlinked inputs"
        fi
        continue
      fi
      rdir="$(mktemp -d "$ext4/reliability-race.XXXXXX")"
      chmod 0755 "$rdir"
      mkdir -p "$rdir/root"
      py race.py "$cs" "$spawn" "$rdir/root" root "${RELIABILITY_RACE_ROUNDS:-3}"
      result "race (root)" $?
      if need_root; then
        user=clonestage-rel
        id -u "$user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$user"
        mkdir -p "$rdir/user"
        py race.py "$cs" "$spawn" "$rdir/user" "$user" "${RELIABILITY_RACE_ROUNDS:-3}"
        result "race (non-root owner)" $?
      else
        skip "race (non-root owner)" "needs root to create the owner"
      fi
      rm -rf "$rdir"
      ;;
    two)
      mkdir -p "$work/two"
      py bazel_load.py "$cs" "$spawn" "$work/two" "$root" two "${RELIABILITY_TWO_SECONDS:-150}"
      result two $?
      ;;
    lies)
      mkdir -p "$work/lies"
      py upstream_lies.py "$cs" "$spawn" "$work/lies"
      result lies $?
      ;;
    grace)
      mkdir -p "$work/grace"
      py grace.py "$cs" "$spawn" "$work/grace" "${RELIABILITY_GRACE_ACTIONS:-120}"
      result grace $?
      ;;
    *)
      fail "$part" "no such part (${all_parts[*]})"
      ;;
  esac
  say "($part: $((SECONDS - t0)) s)"
done

say ""
say "reliability: finished in $((SECONDS - start)) s"
finish
