#!/usr/bin/env bash
# tests/reliability/fuzz.sh SECONDS [WORKDIR]: the fuzz part of the reliability suite. Builds
# rust/fuzz with cargo-fuzz (libFuzzer; stable Rust with RUSTC_BOOTSTRAP=1 for the -Z flags
# cargo-fuzz passes, no sanitizer: the engine is safe Rust, the targets look for panics and
# broken promises) and runs each target for SECONDS (CI: 45; by hand: as long as you like),
# from a corpus kept in WORKDIR and the seeds in rust/fuzz/seeds/<target> (stage_tree's include
# the symlink chain of issue 10, finding 4, for the fuzzer to start from and mutate). Prints
# PASS or FAIL per target (tests/lib/report.sh) with its executions and findings, and a
# crashing input's path and first lines of its report when one is found.
set -u -o pipefail
secs="${1:-45}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
work="${2:-$(mktemp -d "${TMPDIR:-/tmp}/clonestage-fuzz.XXXXXX")}"
mkdir -p "$work"
fuzz="$root/rust/fuzz"
export RUSTC_BOOTSTRAP=1
# Outside the checkout, and shared between runs: the first build takes minutes.
export CARGO_TARGET_DIR="${RELIABILITY_FUZZ_TARGET:-$root/rust/target/fuzz}"
# The patched h2 is a path crate (the checkout's .cargo/config.toml), so cargo does not cap its
# lints as it does for crates.io's: under --cfg fuzzing its own `deny(missing_docs)` fails the
# build on its fuzz_bridge module. Our crates' lints are clippy's job in tests/run.sh.
export RUSTFLAGS="${RUSTFLAGS:-} --cap-lints=warn"
# shellcheck source=tests/lib/report.sh
source "$root/tests/lib/report.sh"
cargo fuzz --help >/dev/null 2>&1 ||
  die "fuzz: cargo-fuzz installed" "it is not (.ci/install.sh: cargo install cargo-fuzz)"
targets=(tree_validate stage_tree)
if ! (cd "$fuzz" && nice cargo fuzz build --sanitizer none -O >"$work/build.log" 2>&1); then
  die "fuzz: cargo fuzz build" "$(tail_of "$work/build.log" 30)"
fi
for t in "${targets[@]}"; do
  mkdir -p "$work/corpus-$t" "$work/artifacts-$t"
  log="$work/$t.log"
  (cd "$fuzz" && nice cargo fuzz run --sanitizer none -O "$t" "$work/corpus-$t" "$fuzz/seeds/$t" -- \
    -max_total_time="$secs" -artifact_prefix="$work/artifacts-$t/" -print_final_stats=1 \
    -timeout=20 -rss_limit_mb=2048) >"$log" 2>&1
  t_rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  if [ -z "$execs" ]; then # a crash ends the run before the final stats
    execs="$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#')"
  fi
  found=$(find "$work/artifacts-$t" -type f | wc -l)
  if [ "$t_rc" = 0 ] && [ "$found" = 0 ]; then
    pass "fuzz $t: ${execs:-0} executions in ${secs} s, 0 findings, corpus $(find "$work/corpus-$t" -type f | wc -l) inputs"
  else
    fail "fuzz $t: ${execs:-0} executions, $found findings (exit $t_rc)" \
      "reproduce: cd rust/fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none $t <input>" \
      "$(find "$work/artifacts-$t" -type f | head -n 3 | sed 's/^/input: /')" \
      "$(grep -m 3 -E 'panicked at|leads out|accepted|ERROR: libFuzzer' -A 1 "$log" | sed 's/^/      | /')"
  fi
done
[ "$failed" = 0 ]
