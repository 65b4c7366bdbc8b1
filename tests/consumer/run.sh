#!/usr/bin/env bash
# tests/consumer/run.sh: the adoption paths, followed as a new user follows them, in fresh
# workspaces created outside the repository, with Bazel 4.2.3 (WORKSPACE mode).
#
#   prebuilt path  the README's WORKSPACE lines for a release archive (http_archive of the
#                  source archive tools/release.sh made, then clonestage_binaries()), with
#                  CLONESTAGE_BINARIES_URL=file://<the release's directory> and no cargo,
#                  rustc or rustup on PATH: `bazel run @clonestage//:install` installs the
#                  release's helper and wrapper (the same bytes; --version matches; timed
#                  with a warm Bazel server) and `bazel test //...` runs through them; a
#                  tampered archive (its SHA256SUMS rewritten too) fails with Bazel's checksum
#                  message and installs nothing; a release whose table lacks this platform
#                  says so and falls back to the source build. The release comes from
#                  CLONESTAGE_RELEASE_OUT (tests/run.sh makes it once per run), else is
#                  cross-built here for this host (minutes);
#   module path    a workspace that takes this checkout as @clonestage (`local_repository`,
#                  the closest Bazel 4.2.3 comes to `bazel_dep`, and clonestage_binaries(),
#                  which says a checkout has no release, so the helper is built from source), runs
#                  `bazel run @clonestage//:install` and then `bazel test //...`: every
#                  action must run through clonestage (`N remote` in Bazel's summary, the
#                  server's stats counting staged inputs by this filesystem's method), with
#                  no other step, no binary copied by hand and no CLONESTAGE_* variable, and
#                  the team's --disk_cache (in the workspace's .bazelrc) left empty; on the
#                  same workspace from a HOME without the helper (a colleague's machine), the
#                  launcher stands aside in one line and the build fills the team's disk cache;
#                  then --check, a second install (idempotent), a foreign tools/bazel
#                  (refused, with how to chain; chained as printed, a build runs through
#                  both launchers and clonestage), a failing install (no cargo on PATH:
#                  says so, leaves no per-version home and no change in the workspace), and
#                  the program's helper branch (given a helper target of the consumer's);
#   checkout path  the README's "without the module" block, read from README.md (the fenced
#                  block after `<!-- without-the-module -->`) and run as written in the
#                  checkout with WS set to a fresh workspace (it runs
#                  `bash tools/install-binaries.sh`, copies tools/bazel and
#                  strategy/clonestage.bazelrc into the workspace's tools/ and adds the
#                  .bazelrc line); then `bazel test //...` runs through clonestage the same way.
#
# Each path gets its own temporary HOME, so the per-version home
# (~/.local/share/clonestage/<version>/bin), the cache (~/.cache/clonestage) and Bazel's
# output root are the test's own and start empty. Rust's toolchain stays the user's
# (RUSTUP_HOME and CARGO_HOME point at the real ones, as they would for that user).
# Debian's /usr/bin/bazel runs <workspace>/tools/bazel with BAZEL_REAL set, as Bazelisk does,
# so `bazel` here is what a user types.
#
# The module path's install builds the helper cold with cargo (~7 min on 2 cores); the
# checkout path reuses the checkout's rust/target (warm after tests/run.sh's cargo steps).
# Prints PASS/FAIL per check, the minutes each path took, and "N passed, M failed";
# exit 1 on any failure. CONSUMER_KEEP=1 keeps the temporary directory.
# Usage: tests/consumer/run.sh [prebuilt|module|checkout]...   (default: all three)

set -u -o pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
paths=("$@")
[ ${#paths[@]} -gt 0 ] || paths=(prebuilt module checkout)

# The user's Rust toolchain, before HOME changes.
export RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
export CARGO_HOME="${CARGO_HOME:-$HOME/.cargo}"
# The release tests/run.sh made for this run (the prebuilt path), kept before the next loop.
release_out="${CLONESTAGE_RELEASE_OUT:-}"
# No override of where things go: the defaults are under test.
for v in $(compgen -e); do
  case "$v" in
    CLONESTAGE_* | XDG_DATA_HOME | XDG_CACHE_HOME | BAZEL_REAL | _CLONESTAGE_LAUNCHER) unset "$v" ;;
  esac
done

work="$(mktemp -d "${TMPDIR:-/var/tmp}/clonestage-consumer.XXXXXX")"
work="$(cd "$work" && pwd -P)"
case "$work/" in
  "$root"/*)
    echo "run.sh: the temporary directory $work is inside the repository; set TMPDIR" >&2
    exit 2
    ;;
esac
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/rust/Cargo.toml" | head -n 1)"

tail_lines=20
# shellcheck source=tests/lib/report.sh
source "$root/tests/lib/report.sh"
# shellcheck source=tests/lib/bazel.sh
source "$root/tests/lib/bazel.sh"
# readme_block NAME: the fenced code block that follows the marker line `<!-- NAME ... -->` in
# README.md.
readme_block() {
  awk -v m="<!-- $1" 'index($0, m) == 1 && substr($0, length(m) + 1, 1) ~ /[ :]/ { armed = 1; next }
    armed && /^```/ { if (inside) exit; inside = 1; next } inside' "$root/README.md"
}

# Every HOME this run made: its Bazel servers and clonestage servers are stopped at the end.
homes=()
cleanup() {
  local h ws
  for h in "${homes[@]}"; do
    for ws in "$h"/../ws*; do
      [ -d "$ws" ] && (cd "$ws" && HOME="$h" CLONESTAGE_DISABLE=1 timeout 60 bazel shutdown) >/dev/null 2>&1
    done
    if [ -x "$h/.local/share/clonestage/$version/bin/clonestage" ]; then
      HOME="$h" "$h/.local/share/clonestage/$version/bin/clonestage" stop --timeout 20 >/dev/null 2>&1
    fi
  done
  if [ "${CONSUMER_KEEP:-0}" = 1 ]; then
    say "kept $work"
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

expected_method() { # the staging method the cache's filesystem should use
  case "$(stat -f -c %T "$1" 2>/dev/null)" in
    ext2/ext3 | ext4 | tmpfs) echo hardlink ;;
    xfs | btrfs) echo reflink ;;
    apfs) echo clonefile ;;
    *) echo "" ;;
  esac
}
stat_of() { # stat_of JSON KEY
  local v
  v="$(sed -n "s/.*\"$2\"[[:space:]]*:[[:space:]]*\([0-9][0-9]*\).*/\1/p" "$1" | head -n 1)"
  echo "${v:-0}"
}

# $PATH less every directory holding cargo, rustc or rustup: a machine with no Rust toolchain.
path_without_rust() {
  local d out=""
  local IFS=:
  for d in $PATH; do
    [ -x "$d/cargo" ] || [ -x "$d/rustc" ] || [ -x "$d/rustup" ] || out="${out:+$out:}$d"
  done
  printf '%s\n' "$out"
}

# A consumer workspace: a few actions and a test. WORKSPACE gets $1 (extra lines).
make_workspace() { # make_workspace DIR EXTRA_WORKSPACE_LINES
  mkdir -p "$1"
  {
    echo 'workspace(name = "consumer")'
    printf '%s\n' "$2"
    # What any offline Bazel 4.2.3 workspace with a test needs, clonestage or not: those
    # repositories would be downloaded otherwise (third_party/bazel_compat/README.md;
    # a test's launcher needs @rules_cc, @bazel_tools needs @rules_java, every test rule
    # @remote_coverage_tools).
    cat <<EOF
local_repository(
    name = "rules_cc",
    path = "$root/third_party/bazel_compat/rules_cc",
)

local_repository(
    name = "rules_java",
    path = "$root/third_party/bazel_compat/rules_java",
)

local_repository(
    name = "remote_coverage_tools",
    path = "$root/third_party/bazel_compat/remote_coverage_tools",
)
EOF
  } >"$1/WORKSPACE"
  echo "hello from the consumer" >"$1/input.txt"
  cat >"$1/BUILD" <<'EOF'
genrule(
    name = "upper",
    srcs = ["input.txt"],
    outs = ["upper.txt"],
    cmd = "tr a-z A-Z < $< > $@",
)

genrule(
    name = "both",
    srcs = [
        "input.txt",
        ":upper",
    ],
    outs = ["both.txt"],
    cmd = "cat $(SRCS) > $@",
)

sh_test(
    name = "both_test",
    srcs = ["both_test.sh"],
    data = [":both"],
)
EOF
  cat >"$1/both_test.sh" <<'EOF'
#!/bin/sh
grep -q "HELLO FROM THE CONSUMER" both.txt && grep -q "hello from the consumer" both.txt
EOF
  chmod +x "$1/both_test.sh"
}

# After `bazel test //...` in WS (log LOG), with HOME's default cache: the check that the
# actions ran through clonestage.
check_through_clonestage() { # NAME WS LOG RC
  local name="$1" ws="$2" log="$3" rc="$4" cs cache remote others method staged json
  cs="$HOME/.local/share/clonestage/$version/bin/clonestage"
  cache="$HOME/.cache/clonestage"
  json="$(dirname "$log")/stats.json"
  "$cs" stats --json >"$json" 2>/dev/null || : >"$json"
  remote="$(spawns "$log" remote)"
  others="$(other_spawns "$log")"
  method="$(expected_method "$cache")"
  staged=$(($(stat_of "$json" clonefile) + $(stat_of "$json" reflink) + $(stat_of "$json" snapshot) + $(stat_of "$json" hardlink) + $(stat_of "$json" copy)))
  if [ "$rc" = 0 ] && grep -q "PASSED" "$log" && [ "$remote" -ge 3 ] && [ -z "$others" ] &&
    [ "$(stat_of "$json" actions)" -ge "$remote" ] && [ "$staged" -gt 0 ] &&
    { [ -z "$method" ] || [ "$(stat_of "$json" "$method")" -gt 0 ]; } &&
    ! grep -q "running Bazel without the clonestage executor" "$log"; then
    pass "$name: $(summary_of "$log" | sed 's/^INFO: //') server actions $(stat_of "$json" actions), inputs staged by ${method:-?} ($(stat -f -c %T "$cache") cache): $(stat_of "$json" "${method:-hardlink}")"
  else
    fail "$name" "bazel exit $rc; summary: $(summary_of "$log"); other spawns: ${others:-none}; server actions $(stat_of "$json" actions); staged $staged (${method:-?}: $(stat_of "$json" "${method:-hardlink}"))" \
      "$(tail_of "$log")"
  fi
  "$cs" stats >"$(dirname "$log")/stats.txt" 2>&1 || true
}

# --- the module path ---------------------------------------------------------------------------

module_path() {
  local t0=$SECONDS dir="$work/module" ws log rc home_bin
  mkdir -p "$dir/home"
  export HOME="$dir/home"
  homes+=("$HOME")
  ws="$dir/ws"
  make_workspace "$ws" "local_repository(
    name = \"clonestage\",
    path = \"$root\",
)

# @clonestage_binaries: a checkout is no release, so it says to build from source.
load(\"@clonestage//:repositories.bzl\", \"clonestage_binaries\")

clonestage_binaries()

# clonestage's own dependency in WORKSPACE mode beyond what every offline 4.2.3
# workspace declares (below): @platforms (//cc selects on @platforms//os), from
# Debian's bazel-platforms. (@rules_cc, which //cc loads, is among those below.)
local_repository(
    name = \"platforms\",
    path = \"/usr/share/bazel/tools/platforms\",
)
"
  home_bin="$HOME/.local/share/clonestage/$version/bin"
  # The team's settings, there before clonestage: a disk cache of its own.
  local team_disk="$dir/team-disk-cache"
  printf 'build --disk_cache=%s\n' "$team_disk" >"$ws/.bazelrc"

  # 1. The documented install command, from a workspace that has no tools/bazel yet. Its cargo
  # build is cold (its own target directory), as a consumer's first install is.
  log="$dir/install.log"
  (cd "$ws" && CARGO_TARGET_DIR="$dir/cargo-target" timeout -k 10 1800 bazel run @clonestage//:install) >"$log" 2>&1
  rc=$?
  rm -rf "$team_disk" # the install's own build, before clonestage was there, filled it
  if [ "$rc" = 0 ] && [ -x "$home_bin/clonestage" ] && [ -x "$home_bin/clonestage-spawn" ] &&
    cmp -s "$ws/tools/bazel" "$root/tools/bazel" &&
    cmp -s "$ws/tools/clonestage.bazelrc" "$root/strategy/clonestage.bazelrc" &&
    grep -qx 'try-import %workspace%/tools/clonestage.bazelrc' "$ws/.bazelrc" &&
    grep -qx "build --disk_cache=$team_disk" "$ws/.bazelrc" &&
    ! grep -q -- '--config=clonestage' "$ws/.bazelrc" &&
    grep -q "building the helper from source: this clonestage is not a release" "$log" &&
    grep -q "building the helper with cargo build --locked --release" "$log" &&
    grep -q "Compiling clonestage" "$log"; then
    pass "module: bazel run @clonestage//:install said a checkout has no prebuilt helpers, built both binaries into $home_bin (cargo's progress shown), installed tools/bazel, tools/clonestage.bazelrc and the one .bazelrc line, which applies no config ($((SECONDS - t0)) s)"
  else
    fail "module: bazel run @clonestage//:install" "exit $rc" "$(tail_of "$log" 30)"
  fi

  # 2. The next `bazel test` runs through clonestage, nothing else done.
  log="$dir/test.log"
  (cd "$ws" && timeout -k 10 600 bazel test //...) >"$log" 2>&1
  rc=$?
  check_through_clonestage "module: bazel test //... runs its actions through clonestage" "$ws" "$log" "$rc"
  if [ ! -e "$team_disk" ] || [ -z "$(find "$team_disk" -type f | head -n 1)" ]; then
    pass "module: through clonestage the team's disk cache stays empty"
  else
    fail "module: the team's disk cache under clonestage" "$(find "$team_disk" -type f | head -n 3)"
  fi

  # 2b. The same workspace on a machine without the helper (another HOME, nothing installed,
  # no checkout; a clone of the workspace, as a colleague has it: without this machine's
  # bazel-* links): the launcher stands aside in one line, and the team's settings apply.
  local colleague="$dir/home-colleague" ws_c="$dir/ws-colleague"
  mkdir -p "$colleague" "$ws_c"
  homes+=("$colleague")
  (cd "$ws" && tar -cf - --exclude='./bazel-*' .) | (cd "$ws_c" && tar -xf -)
  log="$dir/aside.log"
  (cd "$ws_c" && HOME="$colleague" timeout -k 10 600 bazel test //...) >"$log" 2>&1
  rc=$?
  if [ "$rc" = 0 ] && grep -q "PASSED" "$log" && [ "$(spawns "$log" remote)" = 0 ] &&
    [ "$(grep -c 'no clonestage helper found' "$log")" = 1 ] &&
    [ -n "$(find "$team_disk" -type f | head -n 1)" ]; then
    pass "module: without the helper the launcher stands aside and the build fills the team's disk cache ($(summary_of "$log" | sed 's/^INFO: //') $(find "$team_disk" -type f | wc -l) files in it)"
  else
    fail "module: without the helper" "exit $rc; $(summary_of "$log"); disk cache files: $(find "$team_disk" -type f 2>/dev/null | wc -l)" "$(tail_of "$log" 12)"
  fi
  (cd "$ws_c" && HOME="$colleague" CLONESTAGE_DISABLE=1 timeout 60 bazel shutdown) >/dev/null 2>&1

  # 3. --check agrees; a second install changes nothing and adds no second .bazelrc line.
  log="$dir/again.log"
  (cd "$ws" && CARGO_TARGET_DIR="$dir/cargo-target" timeout -k 10 600 bazel run @clonestage//:install -- --check) >"$dir/check.log" 2>&1
  local check_rc=$?
  (cd "$ws" && CARGO_TARGET_DIR="$dir/cargo-target" timeout -k 10 600 bazel run @clonestage//:install) >"$log" 2>&1
  rc=$?
  if [ "$check_rc" = 0 ] && [ "$rc" = 0 ] && [ "$(grep -c 'tools/clonestage.bazelrc' "$ws/.bazelrc")" = 1 ] &&
    grep -q "up to date: $ws/tools/bazel" "$log"; then
    pass "module: --check passes after the install; a second install is a no-op"
  else
    fail "module: --check / second install" "check exit $check_rc, install exit $rc" "$(tail_of "$dir/check.log" 8)" "$(tail_of "$log" 8)"
  fi

  # The generated program, run the way `bazel run` runs it but from another directory and
  # with no runfiles variables: it finds its files through $0.runfiles, not $PWD.
  local prog
  prog="$(cd "$ws" && bazel info bazel-bin 2>/dev/null)/external/clonestage/install.sh"

  # 4. A foreign tools/bazel is refused (nothing built, nothing replaced), with how to chain;
  # chained as printed, `bazel test` runs through both launchers and clonestage.
  local ws2="$dir/ws2"
  make_workspace "$ws2" ""
  # Other content than ws's, so its actions run rather than hit ws's results in the cache.
  echo "hello from the consumer, the team's workspace" >"$ws2/input.txt"
  mkdir -p "$ws2/tools"
  printf '#!/bin/sh\n# the team launcher\necho "team launcher ran" >&2\n' >"$ws2/tools/bazel"
  chmod +x "$ws2/tools/bazel"
  cp "$ws2/tools/bazel" "$dir/foreign.orig"
  log="$dir/foreign.log"
  (cd / && env -u RUNFILES_DIR -u RUNFILES_MANIFEST_FILE CARGO_TARGET_DIR="$dir/cargo-target" "$prog" "$ws2") >"$log" 2>&1
  rc=$?
  (cd / && env -u RUNFILES_DIR -u RUNFILES_MANIFEST_FILE CARGO_TARGET_DIR="$dir/cargo-target" "$prog" --as clonestage-bazel "$ws2") >"$dir/chain.log" 2>&1
  local chain_rc=$?
  # shellcheck disable=SC2016 # the chaining line printed, verbatim
  if [ "$rc" = 1 ] && cmp -s "$ws2/tools/bazel" "$dir/foreign.orig" &&
    grep -q "is not clonestage's launcher" "$log" && grep -q -- "--as clonestage-bazel" "$log" &&
    grep -q 'exec "$(dirname "$0")/clonestage-bazel" "$@"' "$log" &&
    [ "$chain_rc" = 0 ] && cmp -s "$ws2/tools/clonestage-bazel" "$root/tools/bazel" &&
    cmp -s "$ws2/tools/bazel" "$dir/foreign.orig"; then
    pass "module: a foreign tools/bazel is kept (exit 1, how to chain printed); --as clonestage-bazel installs beside it"
  else
    fail "module: foreign tools/bazel" "exit $rc (want 1), --as exit $chain_rc" "$(tail_of "$log" 12)" "$(tail_of "$dir/chain.log" 6)"
  fi
  # The chaining line exactly as printed.
  # shellcheck disable=SC2016 # the line printed, verbatim
  grep -F 'exec "$(dirname "$0")/clonestage-bazel" "$@"' "$log" | sed 's/^ *//' >>"$ws2/tools/bazel"
  log="$dir/chained-test.log"
  (cd "$ws2" && timeout -k 10 600 bazel test //...) >"$log" 2>&1
  rc=$?
  if grep -q "team launcher ran" "$log"; then
    check_through_clonestage "module: chained (team tools/bazel execs tools/clonestage-bazel as printed), bazel test runs through clonestage" "$ws2" "$log" "$rc"
  else
    fail "module: chained launchers" "the team launcher did not run" "$(tail_of "$log" 12)"
  fi
  (cd "$ws2" && timeout 60 bazel shutdown) >/dev/null 2>&1

  # 5. The program's helper branch (a helper given, no cargo), with a helper target of the
  # consumer's own: the rule given a wrapper script, its program run from / with no runfiles
  # variables (it finds everything through $0.runfiles, including a helper of the main
  # repository). The prebuilt path below takes the same branch through @clonestage_binaries.
  # shellcheck disable=SC2016 # "$@" is the generated script's
  printf '#!/bin/sh\nexec "%s" "$@"\n' "$home_bin/clonestage" >"$ws/prebuilt_helper.sh"
  chmod +x "$ws/prebuilt_helper.sh"
  cat >>"$ws/BUILD" <<'EOF'

load("@clonestage//private:install.bzl", "clonestage_install_rule")

sh_binary(
    name = "prebuilt_helper",
    srcs = ["prebuilt_helper.sh"],
)

clonestage_install_rule(
    name = "install_with_helper",
    bazelrc = "@clonestage//:strategy/clonestage.bazelrc",
    helper = ":prebuilt_helper",
    launcher = "@clonestage//:tools/bazel",
    spawn = "@clonestage//cc:clonestage-spawn",
)
EOF
  local ws4="$dir/ws4" helper_data="$dir/helperdata"
  mkdir -p "$ws4"
  log="$dir/helper-branch.log"
  (cd "$ws" && timeout -k 10 600 bazel build //:install_with_helper) >"$log" 2>&1 &&
    (cd / && env -u RUNFILES_DIR -u RUNFILES_MANIFEST_FILE XDG_DATA_HOME="$helper_data" \
      "$(cd "$ws" && bazel info bazel-bin 2>/dev/null)/install_with_helper.sh" "$ws4") >>"$log" 2>&1
  rc=$?
  if [ "$rc" = 0 ] && cmp -s "$helper_data/clonestage/$version/bin/clonestage" "$home_bin/clonestage" &&
    cmp -s "$helper_data/clonestage/$version/bin/clonestage-spawn" "$home_bin/clonestage-spawn" &&
    cmp -s "$ws4/tools/bazel" "$root/tools/bazel" && grep -qx 'try-import %workspace%/tools/clonestage.bazelrc' "$ws4/.bazelrc" &&
    grep -q "installing the prebuilt helper and spawn wrapper" "$log" && ! grep -q "cargo build" "$log"; then
    pass "module: the helper branch installs a given helper and wrapper without cargo"
  else
    fail "module: the helper branch" "exit $rc" "$(tail_of "$log" 15)"
  fi

  # 6. A failing install (no cargo on PATH) says so and leaves nothing half-installed.
  local ws3="$dir/ws3" fail_data="$dir/faildata" nocargo_path
  mkdir -p "$ws3"
  nocargo_path="$(path_without_rust)"
  log="$dir/nocargo.log"
  (cd / && env -u RUNFILES_DIR -u RUNFILES_MANIFEST_FILE CARGO_TARGET_DIR="$dir/cargo-target" PATH="$nocargo_path" XDG_DATA_HOME="$fail_data" "$prog" "$ws3") >"$log" 2>&1
  rc=$?
  if [ "$rc" = 1 ] && grep -q "cargo not found" "$log" && ! [ -e "$fail_data/clonestage/$version/bin" ] &&
    [ -z "$(ls -A "$ws3")" ]; then
    pass "module: an install without cargo fails with the reason and leaves no per-version home and an untouched workspace"
  else
    fail "module: install without cargo" "exit $rc (want 1); $(find "$fail_data" 2>/dev/null | head -5 | tr '\n' ' '); ws3: $(find "$ws3" -mindepth 1 | tr '\n' ' ')" "$(tail_of "$log" 10)"
  fi
  say "module path: $((SECONDS - t0)) s"
}

# --- the prebuilt path (a release's archives, no Rust toolchain) -------------------------------

# The release tests/run.sh made once for this CI run (CLONESTAGE_RELEASE_OUT, by
# tests/module/release_binaries_test.sh), else one made here for this host only (a cold cross
# build: minutes). Prints its directory.
release_dir() {
  local triple="$1" out
  if [ -n "$release_out" ] && [ -f "$release_out/clonestage-v$version-$triple.tar.gz" ]; then
    printf '%s\n' "$release_out"
    return
  fi
  out="$work/release"
  "$root/tools/release.sh" "v$version" --ref HEAD --platforms "$triple" --out "$out" >"$work/release.log" 2>&1 ||
    return 1
  printf '%s\n' "$out"
}

prebuilt_path() {
  local t0=$SECONDS dir="$work/prebuilt" ws log rc rel triple src sha home_bin norust x
  mkdir -p "$dir/home"
  export HOME="$dir/home"
  homes+=("$HOME")
  ws="$dir/ws"
  triple="$(uname -m)-unknown-linux-gnu"
  if ! rel="$(release_dir "$triple")"; then
    fail "prebuilt: tools/release.sh for $triple" "$(tail_of "$work/release.log" 30)"
    return
  fi
  src="$rel/clonestage-v$version.tar.gz"
  sha="$(sha256sum "$src" | cut -d' ' -f1)"
  # The README's WORKSPACE lines for a release archive (the module is not in the registry yet),
  # with file:// for the release's URL; @platforms and @rules_cc serve the source fallback.
  make_workspace "$ws" "load(\"@bazel_tools//tools/build_defs/repo:http.bzl\", \"http_archive\")

http_archive(
    name = \"clonestage\",
    sha256 = \"$sha\",
    strip_prefix = \"clonestage-$version\",
    urls = [\"file://$src\"],
)

load(\"@clonestage//:repositories.bzl\", \"clonestage_binaries\")

clonestage_binaries()

local_repository(
    name = \"platforms\",
    path = \"/usr/share/bazel/tools/platforms\",
)
"
  home_bin="$HOME/.local/share/clonestage/$version/bin"
  norust="$(path_without_rust)"
  mkdir -p "$dir/archive"
  tar -xzf "$rel/clonestage-v$version-$triple.tar.gz" -C "$dir/archive"
  x="$dir/archive/clonestage-v$version-$triple"

  # 1. The install with the archives at CLONESTAGE_BINARIES_URL, no Rust toolchain on PATH,
  # timed with Bazel's server already up (a developer's usual state).
  (cd "$ws" && CLONESTAGE_DISABLE=1 PATH="$norust" bazel info release) >"$dir/info.log" 2>&1
  local t1=$SECONDS
  log="$dir/install.log"
  (cd "$ws" && PATH="$norust" CLONESTAGE_BINARIES_URL="file://$rel" timeout -k 10 900 bazel run @clonestage//:install) >"$log" 2>&1
  rc=$?
  local took=$((SECONDS - t1)) want_sha
  want_sha="$(grep " clonestage-v$version-$triple.tar.gz\$" "$rel/SHA256SUMS" | cut -d' ' -f1)"
  if [ "$rc" = 0 ] && grep -q "using the prebuilt clonestage $version for $triple (clonestage-v$version-$triple.tar.gz, sha256 $want_sha)" "$log" &&
    cmp -s "$home_bin/clonestage" "$x/clonestage" && cmp -s "$home_bin/clonestage-spawn" "$x/clonestage-spawn" &&
    [ "$("$home_bin/clonestage" --version)" = "clonestage $version" ] &&
    cmp -s "$ws/tools/bazel" "$root/tools/bazel" && grep -qx 'try-import %workspace%/tools/clonestage.bazelrc' "$ws/.bazelrc" && ! grep -q -- '--config=clonestage' "$ws/.bazelrc" &&
    ! grep -qE "cargo|Compiling" "$log"; then
    pass "prebuilt: bazel run @clonestage//:install with no Rust toolchain installed the release's helper and wrapper (--version: $("$home_bin/clonestage" --version); sha256 $want_sha) in $took s with a warm Bazel server"
  else
    fail "prebuilt: bazel run @clonestage//:install from the release archives" "exit $rc" "$(tail_of "$log" 25)"
  fi

  # 2. The next build runs through the prebuilt clonestage.
  log="$dir/test.log"
  (cd "$ws" && PATH="$norust" timeout -k 10 600 bazel test //...) >"$log" 2>&1
  rc=$?
  check_through_clonestage "prebuilt: bazel test //... runs its actions through the prebuilt clonestage" "$ws" "$log" "$rc"
  (cd "$ws" && CLONESTAGE_DISABLE=1 "$home_bin/clonestage" stop --timeout 20) >/dev/null 2>&1

  # 3. A tampered archive (and a SHA256SUMS rewritten to match it: the mirror's own sums are not
  # trusted) fails the fetch with Bazel's checksum message and installs nothing. Same Bazel
  # server: changing CLONESTAGE_BINARIES_URL must refetch (the rule declares it); no repository
  # cache, which holds the good archive under its sha256.
  local bad="$dir/tampered" bad_data="$dir/tampered-data" ws_bad="$dir/ws-tampered"
  mkdir -p "$bad" "$ws_bad"
  cp "$rel/clonestage-v$version-$triple.tar.gz" "$bad/"
  printf 'tampered' >>"$bad/clonestage-v$version-$triple.tar.gz"
  (cd "$bad" && sha256sum "clonestage-v$version-$triple.tar.gz" >SHA256SUMS)
  log="$dir/tampered.log"
  (cd "$ws" && PATH="$norust" CLONESTAGE_BINARIES_URL="file://$bad" XDG_DATA_HOME="$bad_data" \
    timeout -k 10 600 bazel run --repository_cache= @clonestage//:install -- "$ws_bad") >"$log" 2>&1
  rc=$?
  if [ "$rc" != 0 ] && grep -q "Checksum was [0-9a-f]* but wanted $want_sha" "$log" &&
    grep -q "$bad/clonestage-v$version-$triple.tar.gz" "$log" &&
    ! [ -e "$bad_data/clonestage" ] && [ -z "$(ls -A "$ws_bad")" ]; then
    pass "prebuilt: a tampered archive fails the fetch ($(grep -o 'Checksum was [0-9a-f]* but wanted [0-9a-f]*' "$log" | head -n 1 | cut -c1-60)...) and installs nothing"
  else
    fail "prebuilt: a tampered archive" "exit $rc (want non-zero); data: $(find "$bad_data" 2>/dev/null | head -3 | tr '\n' ' '); ws: $(find "$ws_bad" -mindepth 1 | tr '\n' ' ')" "$(tail_of "$log" 15)"
  fi

  # 4. A release without an archive for this platform falls back to the source build and says
  # so: the release's tree with this platform's row taken out of its table (a checked copy),
  # given as @clonestage. No cargo on PATH, so the source build stops at cargo: the choice is
  # what is tested here (the module path above runs a whole source build).
  local tree="$dir/no-archive-tree" none_data="$dir/no-archive-data" ws_none="$dir/ws-no-archive"
  mkdir -p "$tree" "$ws_none"
  tar -xzf "$src" -C "$tree" --strip-components=1
  sed -i "/\"$triple\"/d" "$tree/private/binaries_table.bzl"
  log="$dir/no-archive.log"
  if grep -q "$triple" "$tree/private/binaries_table.bzl"; then
    fail "prebuilt: no archive for this platform" "could not take $triple out of the table"
  else
    (cd "$ws" && PATH="$norust" CLONESTAGE_BINARIES_URL="file://$rel" XDG_DATA_HOME="$none_data" \
      timeout -k 10 600 bazel run --override_repository=clonestage="$tree" @clonestage//:install -- "$ws_none") >"$log" 2>&1
    rc=$?
    if [ "$rc" = 1 ] && grep -q "building the helper from source: release $version has no prebuilt helpers for this platform" "$log" &&
      grep -q "building the helper with cargo build" "$log" && grep -q "cargo not found" "$log" &&
      ! [ -e "$none_data/clonestage/$version/bin" ] && [ -z "$(ls -A "$ws_none")" ]; then
      pass "prebuilt: a release with no archive for $triple falls back to the source build, saying so in one line"
    else
      fail "prebuilt: no archive for this platform" "exit $rc (want 1, at cargo)" "$(tail_of "$log" 15)"
    fi
  fi
  say "prebuilt path: $((SECONDS - t0)) s"
}

# --- the checkout path (the README's "without the module") ------------------------------------

checkout_path() {
  local t0=$SECONDS dir="$work/checkout" ws log rc
  mkdir -p "$dir/home"
  export HOME="$dir/home"
  homes+=("$HOME")
  ws="$dir/ws"
  make_workspace "$ws" ""

  # The README's words, taken from README.md itself (the fenced block after the marker
  # comment), so an edit of the README is what runs here. The user's first line names the
  # workspace; here WS is set to the test's own.
  local block
  block="$(readme_block without-the-module)"
  log="$dir/install.log"
  if [ "$(printf '%s\n' "$block" | head -n 1)" != 'WS=/path/to/your/workspace' ]; then
    fail "checkout: the README's \"without the module\" block" "its first line is not WS=/path/to/your/workspace" "$(printf '%s\n' "$block" | sed 's/^/      | /')"
    return
  fi
  (cd "$root" && export WS="$ws" && printf '%s\n' "$block" | sed 1d | timeout -k 10 1800 bash -euo pipefail -x) >"$log" 2>&1
  rc=$?
  if [ "$rc" = 0 ] && [ -x "$HOME/.local/share/clonestage/$version/bin/clonestage-spawn" ] &&
    cmp -s "$ws/tools/bazel" "$root/tools/bazel" && grep -qx 'try-import %workspace%/tools/clonestage.bazelrc' "$ws/.bazelrc"; then
    pass "checkout: the README's \"without the module\" block ran as written and installed both binaries ($(grep -o 'building clonestage-spawn: [a-z+]*' "$log" | head -n 1); $((SECONDS - t0)) s)"
  else
    fail "checkout: the README's \"without the module\" block" "exit $rc" "$(tail_of "$log" 30)"
  fi
  # Bazel of the checkout (install-binaries.sh built the wrapper with it) is not needed again.
  (cd "$root" && CLONESTAGE_DISABLE=1 timeout 60 bazel shutdown) >/dev/null 2>&1

  log="$dir/test.log"
  (cd "$ws" && timeout -k 10 600 bazel test //...) >"$log" 2>&1
  rc=$?
  check_through_clonestage "checkout: bazel test //... runs its actions through clonestage" "$ws" "$log" "$rc"
  say "checkout path: $((SECONDS - t0)) s"
}

for p in "${paths[@]}"; do
  case "$p" in
    prebuilt) prebuilt_path ;;
    module) module_path ;;
    checkout) checkout_path ;;
    *)
      echo "run.sh: unknown path $p (prebuilt, module, checkout)" >&2
      exit 2
      ;;
  esac
  # One Bazel server at a time on this machine.
  for h in "${homes[@]}"; do
    for ws in "$h"/../ws*; do
      [ -d "$ws" ] && (cd "$ws" && HOME="$h" CLONESTAGE_DISABLE=1 timeout 60 bazel shutdown) >/dev/null 2>&1
    done
  done
done

finish
