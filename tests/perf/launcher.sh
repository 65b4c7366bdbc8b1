#!/usr/bin/env bash
# tests/perf/launcher.sh: what the launcher adds to one Bazel command on its fast path
# (issue 25's target: <= 5 ms by median), measured side by side in one run.
#
# A throwaway workspace whose .bazelversion says 7.4.1 (the version is known without running
# Bazel), the helper in the per-version home (where installs put it), a server already up on
# a private cache, and a stub Bazel that writes its arguments and exits. Interleaved rounds
# (the order rotates each round) time, with the same environment:
#   bazel   the stub Bazel alone
#   shim    tools/bazel of this checkout (the POSIX shim, then `clonestage launch`)
#   old     a second launcher to compare, when PERF_OLD_LAUNCHER names one (e.g. the bash
#           launcher of an earlier commit: `git show <commit>:tools/bazel > /tmp/old-bazel`);
#           it runs against the same helper
# each running `build //x`, and prints per configuration the median, 10th and 90th
# percentiles of the wall time, the median of the per-round differences to `bazel`, and the
# median CPU time (user + system of the command's processes, from getrusage: what the load of
# a shared machine inflates least). A benchmark, not a test: it judges nothing. Say the
# machine's load (uptime) with any figure.
#
# Usage: bash tests/perf/launcher.sh [ROUNDS]   (default 200)
# Environment: CLONESTAGE_BIN (default rust/target/release/clonestage), PERF_OLD_LAUNCHER,
# PERF_DIR (default a new /var/tmp/clonestage-perf.XXXXXX, removed at exit unless PERF_KEEP=1).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rounds="${1:-200}"
bin="${CLONESTAGE_BIN:-$root/rust/target/release/clonestage}"
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/rust/Cargo.toml" | head -n 1)"
dir="${PERF_DIR:-$(mktemp -d /var/tmp/clonestage-perf.XXXXXX)}"
cache="$dir/cache"
home="$dir/home"
ws="$dir/ws"
finish() {
  "$bin" --cache "$cache" stop --timeout 20 >/dev/null 2>&1 || true
  [ "${PERF_KEEP:-0}" = 1 ] || rm -rf "$dir"
}
trap finish EXIT

mkdir -p "$ws/tools" "$home" "$dir/bin"
: >"$ws/WORKSPACE"
echo 7.4.1 >"$ws/.bazelversion"
cp "$root/tools/bazel" "$ws/tools/bazel"
if [ -n "${PERF_OLD_LAUNCHER:-}" ]; then
  cp "$PERF_OLD_LAUNCHER" "$ws/tools/old-bazel"
  chmod +x "$ws/tools/old-bazel"
fi
cp "$root/tests/launcher/stubs/bazel" "$dir/bin/bazel-7.4.1"
printf '#!/bin/sh\nexit 0\n' >"$dir/spawn"
chmod +x "$dir/spawn"
HOME="$home" "$bin" self-install --spawn "$dir/spawn" >/dev/null
"$bin" --cache "$cache" serve --spawn "$dir/spawn" --jobs 1 </dev/null >"$dir/serve.log" 2>&1 &
for _ in $(seq 1 200); do
  "$bin" --cache "$cache" address >/dev/null 2>&1 && break
  sleep 0.05
done

echo "launcher fast path: $rounds rounds, $(uptime | sed 's/.*load/load/')"
python3 - "$rounds" "$ws" "$dir" "$home" "$cache" <<'EOF'
import os, resource, statistics, subprocess, sys, time

rounds, ws, d, home, cache = int(sys.argv[1]), *sys.argv[2:]
real = os.path.join(d, "bin", "bazel-7.4.1")
env = {
    "HOME": home, "PATH": "/usr/local/bin:/usr/bin:/bin", "CLONESTAGE_CACHE": cache,
    "BAZEL_REAL": real, "STUB_BAZEL_OUT": os.path.join(d, "args"),
}
configs = {"bazel": [real, "build", "//x"], "shim": [os.path.join(ws, "tools/bazel"), "build", "//x"]}
old = os.path.join(ws, "tools/old-bazel")
if os.path.exists(old):
    configs["old"] = [old, "build", "//x"]
names = list(configs)
times = {n: [] for n in names}
cpu = {n: [] for n in names}

def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r.ru_utime + r.ru_stime) * 1000

def once(cmd, n=None):
    c0 = children_cpu()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, cwd=ws, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = (time.perf_counter() - t0) * 1000
    if n:
        cpu[n].append(children_cpu() - c0)
    if p.returncode != 0 or p.stderr:
        sys.exit(f"{cmd[0]} failed or talked: exit {p.returncode}: {p.stderr.decode()}")
    return dt

for n in names:  # warm-up: the launcher's rc file, page cache
    for _ in range(5):
        once(configs[n])
once(configs["shim"])
with open(env["STUB_BAZEL_OUT"]) as f:
    print("shim's Bazel arguments:", " ".join(l.strip() for l in f))
for r in range(rounds):
    order = names[r % len(names):] + names[:r % len(names)]
    for n in order:
        times[n].append(once(configs[n], n))

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]

print(f"{'config':8} {'wall ms: median':>16} {'p10':>7} {'p90':>7} {'added (median of per-round diffs)':>35} {'CPU ms: median':>15} {'added':>7}")
for n in names:
    diff = [a - b for a, b in zip(times[n], times["bazel"])]
    added = "" if n == "bazel" else f"{statistics.median(diff):.2f}"
    cpu_added = "" if n == "bazel" else f"{statistics.median(cpu[n]) - statistics.median(cpu['bazel']):.2f}"
    print(f"{n:8} {statistics.median(times[n]):16.2f} {pct(times[n], .1):7.2f} {pct(times[n], .9):7.2f} {added:>35} {statistics.median(cpu[n]):15.2f} {cpu_added:>7}")
EOF
