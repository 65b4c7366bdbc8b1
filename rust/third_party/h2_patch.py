#!/usr/bin/env python3
"""Give Bazel's crate_universe the same h2 as cargo, without a path [patch].

Contract:
  python3 rust/third_party/h2_patch.py generate [--root DIR] [--crate FILE]
      writes rust/third_party/h2-authority.patch (the vendored tree rust/third_party/h2
      against crates.io's h2 of the same version, as a -p1 unified diff) and
      rust/Cargo.bazel.lock (rust/Cargo.lock with h2 taken from crates.io, source and
      checksum), and prints what it wrote.
  python3 rust/third_party/h2_patch.py check [--root DIR] [--crate FILE] [--no-cargo]
      exits 0 when both files are what `generate` writes, the committed patch applied with
      `patch -p1` to crates.io's h2 gives exactly the vendored tree, and (unless --no-cargo)
      `cargo metadata --locked --offline` accepts Cargo.bazel.lock for a copy of the
      workspace without the [patch] (what crate_universe's splicing runs); exits 1 with one
      line per problem; 2 on bad usage.

DIR is the checkout (default: this one). FILE is crates.io's h2-<version>.crate; by default
the one in cargo's registry cache ($CARGO_HOME/registry/cache/*/), fetched there with
`cargo fetch` in a scratch project outside the checkout when missing (cargo builds of
clonestage never download it, the [patch] replaces it). The check's cargo step also runs
`cargo fetch --locked` on its copy of the workspace first: `metadata --offline` needs every
platform's packages, and a fresh cargo home has only what a Linux build downloaded.

Why the patch exists and why Bazel needs these two files: rust/third_party/h2/PATCH.md.
"""

import argparse
import difflib
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib

CRATE = "h2"
VENDORED = "rust/third_party/h2"
PATCH = "rust/third_party/h2-authority.patch"
CARGO_LOCK = "rust/Cargo.lock"
BAZEL_LOCK = "rust/Cargo.bazel.lock"
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"
# Files that differ from the published package other than by the patch: PATCH.md lists them
# ("Removed from the published package" / "added"), and check() requires it to.
UPSTREAM_ONLY = (".github", "Cargo.lock", ".cargo-ok")
VENDORED_ONLY = ("PATCH.md",)


class Problem(Exception):
    pass


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def lock_packages(text, where):
    try:
        return tomllib.loads(text).get("package", [])
    except tomllib.TOMLDecodeError as e:
        raise Problem(f"{where}: not a Cargo lockfile: {e}") from e


def patched_version(root):
    """The version of h2 that rust/Cargo.lock takes from the path [patch] (no source)."""
    path = os.path.join(root, CARGO_LOCK)
    found = [p for p in lock_packages(read(path), CARGO_LOCK)
             if p["name"] == CRATE and "source" not in p]
    if len(found) != 1:
        raise Problem(f"{CARGO_LOCK}: expected one {CRATE} without a source (the path [patch] of "
                      f".cargo/config.toml), found {len(found)}: run cargo from inside the checkout "
                      "so it sees the [patch]")
    return found[0]["version"]


def find_crate(version, explicit=None):
    """Path of crates.io's <crate>-<version>.crate, fetching it with cargo if needed."""
    if explicit:
        if not os.path.isfile(explicit):
            raise Problem(f"--crate {explicit}: no such file")
        return explicit
    home = os.environ.get("CARGO_HOME") or os.path.expanduser("~/.cargo")
    pattern = os.path.join(home, "registry", "cache", "*", f"{CRATE}-{version}.crate")
    hits = sorted(glob.glob(pattern))
    if hits:
        return hits[0]
    # A scratch project outside the checkout, so the checkout's [patch] does not apply.
    with tempfile.TemporaryDirectory(prefix="h2-fetch-") as d:
        with open(os.path.join(d, "Cargo.toml"), "w", encoding="utf-8") as f:
            f.write(f'[package]\nname = "fetch"\nversion = "0.0.0"\nedition = "2021"\n\n'
                    f'[dependencies]\n{CRATE} = "={version}"\n')
        os.makedirs(os.path.join(d, "src"))
        with open(os.path.join(d, "src", "lib.rs"), "w", encoding="utf-8") as f:
            f.write("")
        r = subprocess.run(["cargo", "fetch", "--manifest-path", os.path.join(d, "Cargo.toml")],
                           cwd=d, capture_output=True, text=True)
        if r.returncode != 0:
            raise Problem(f"cargo fetch of {CRATE} {version} (to get crates.io's package) failed: "
                          f"{r.stderr.strip()[-400:]}")
    hits = sorted(glob.glob(pattern))
    if not hits:
        raise Problem(f"cargo fetch ran, but there is no {pattern}")
    return hits[0]


def unpack(crate_file, version, into):
    """Unpack a .crate (tar.gz of <crate>-<version>/) into `into`; return the package dir."""
    prefix = f"{CRATE}-{version}"
    with tarfile.open(crate_file, "r:gz") as tar:
        for m in tar.getmembers():
            name = m.name
            if not (name == prefix or name.startswith(prefix + "/")) or ".." in name.split("/"):
                raise Problem(f"{crate_file}: unexpected member {name!r}")
            if not (m.isfile() or m.isdir()):
                raise Problem(f"{crate_file}: {name!r} is neither a file nor a directory")
        tar.extractall(into, filter="data") if hasattr(tarfile, "data_filter") else tar.extractall(into)
    return os.path.join(into, prefix)


def tree_files(top, skip):
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        rel_dir = os.path.relpath(dirpath, top)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in skip]
            filenames = [f for f in filenames if f not in skip]
        dirnames.sort()
        for name in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name)).replace(os.sep, "/")
            with open(os.path.join(dirpath, name), "rb") as f:
                out[rel] = f.read()
    return out


def lines_of(data, rel):
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Problem(f"{rel}: binary file differs; the patch can only carry text") from e
    return text.splitlines(keepends=True)


def make_patch(upstream_dir, vendored_dir):
    """A -p1 unified diff from the published package to the vendored tree."""
    a = tree_files(upstream_dir, UPSTREAM_ONLY)
    b = tree_files(vendored_dir, VENDORED_ONLY)
    chunks = []
    for rel in sorted(set(a) | set(b)):
        if a.get(rel) == b.get(rel):
            continue
        old = lines_of(a[rel], rel) if rel in a else []
        new = lines_of(b[rel], rel) if rel in b else []
        diff = list(difflib.unified_diff(old, new, f"a/{rel}" if rel in a else "/dev/null",
                                         f"b/{rel}" if rel in b else "/dev/null", n=3))
        # Git-style file headers: Bazel's patch implementation (what http_archive runs with no
        # patch_tool) reads a plain "--- a/next" after a hunk as a removed line and fails.
        chunks.append(f"diff --git a/{rel} b/{rel}\n")
        if rel not in a:
            chunks.append("new file mode 100644\n")
        elif rel not in b:
            chunks.append("deleted file mode 100644\n")
        for line in diff:
            chunks.append(line)
            if not line.endswith("\n"):
                chunks.append("\n\\ No newline at end of file\n")
    return "".join(chunks)


def make_bazel_lock(cargo_lock_text, version, checksum):
    """Cargo.lock with h2 from crates.io, formatted as cargo writes it (source, checksum)."""
    block = re.compile(r'(\[\[package\]\]\nname = "%s"\nversion = "%s"\n)(?!source = )'
                       % (re.escape(CRATE), re.escape(version)))
    out, n = block.subn(lambda m: f'{m.group(1)}source = "{CRATES_IO}"\nchecksum = "{checksum}"\n',
                        cargo_lock_text)
    if n != 1:
        raise Problem(f"{CARGO_LOCK}: found {n} source-less [[package]] blocks for {CRATE} {version}")
    return out


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            h.update(block)
    return h.hexdigest()


def expected(root, crate_arg, tmp):
    version = patched_version(root)
    crate_file = find_crate(version, crate_arg)
    upstream = unpack(crate_file, version, tmp)
    patch = make_patch(upstream, os.path.join(root, VENDORED))
    if not patch:
        raise Problem(f"{VENDORED} is identical to crates.io's {CRATE} {version}: drop the "
                      "[patch] instead (PATCH.md, 'Updating or dropping the patch')")
    lock = make_bazel_lock(read(os.path.join(root, CARGO_LOCK)), version, sha256(crate_file))
    return version, upstream, patch, lock


def generate(root, crate_arg):
    with tempfile.TemporaryDirectory(prefix="h2-patch-") as tmp:
        version, _, patch, lock = expected(root, crate_arg, tmp)
    for rel, text in ((PATCH, patch), (BAZEL_LOCK, lock)):
        with open(os.path.join(root, rel), "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {rel} ({CRATE} {version})")


def copy_workspace_without_patch(root, lock_text, into):
    """rust/'s workspace with the given lockfile, outside the checkout (no .cargo/config.toml)."""
    src = os.path.join(root, "rust")
    manifest = tomllib.loads(read(os.path.join(src, "Cargo.toml")))
    shutil.copy(os.path.join(src, "Cargo.toml"), into)
    for member in manifest.get("workspace", {}).get("members", []):
        shutil.copytree(os.path.join(src, member), os.path.join(into, member),
                        ignore=shutil.ignore_patterns("target"))
    with open(os.path.join(into, "Cargo.lock"), "w", encoding="utf-8") as f:
        f.write(lock_text)


def check(root, crate_arg, use_cargo):
    problems = []
    with tempfile.TemporaryDirectory(prefix="h2-patch-") as tmp:
        version, upstream, patch, lock = expected(root, crate_arg, tmp)
        for rel, want in ((PATCH, patch), (BAZEL_LOCK, lock)):
            path = os.path.join(root, rel)
            have = read(path) if os.path.isfile(path) else None
            if have != want:
                problems.append(f"{rel}: {'missing' if have is None else 'stale'}: it is not what "
                                f"the vendored {VENDORED} and {CARGO_LOCK} give "
                                "(run: python3 rust/third_party/h2_patch.py generate)")
        # Apply the committed patch as strictly as Bazel's http_archive does (-p1, its own
        # patch implementation, which allows no fuzz) and compare trees.
        patch_path = os.path.join(root, PATCH)
        if os.path.isfile(patch_path):
            applied = os.path.join(tmp, "applied")
            shutil.copytree(upstream, applied)
            r = subprocess.run(["patch", "-p1", "--batch", "--forward", "--quiet", "--fuzz=0",
                                "--no-backup-if-mismatch", "-d", applied,
                                "-i", os.path.abspath(patch_path)], capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f"{PATCH}: does not apply to crates.io's {CRATE} {version}: "
                                f"{(r.stdout + r.stderr).strip()[-400:]}")
            else:
                got = tree_files(applied, UPSTREAM_ONLY)
                want_tree = tree_files(os.path.join(root, VENDORED), VENDORED_ONLY)
                differ = sorted(k for k in set(got) | set(want_tree) if got.get(k) != want_tree.get(k))
                if differ:
                    problems.append(f"{PATCH} applied to crates.io's {CRATE} {version} differs from "
                                    f"{VENDORED} in: {', '.join(differ[:10])}")
        notes = read(os.path.join(root, VENDORED, "PATCH.md"))
        for name in UPSTREAM_ONLY[:2] + VENDORED_ONLY:
            if f"`{name}" not in notes:
                problems.append(f"{VENDORED}/PATCH.md does not name `{name}`, which the patch leaves out")
        if use_cargo and os.path.isfile(os.path.join(root, BAZEL_LOCK)):
            ws = os.path.join(tmp, "ws")
            os.makedirs(ws)
            copy_workspace_without_patch(root, read(os.path.join(root, BAZEL_LOCK)), ws)
            # `metadata --offline` needs every package the lock names, for every platform
            # (anstyle-wincon and the other Windows-only ones included), while a machine's
            # cargo home holds only what its own builds downloaded: fetch them first.
            r = subprocess.run(["cargo", "fetch", "--locked", "--manifest-path", os.path.join(ws, "Cargo.toml")],
                               cwd=ws, capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f"{BAZEL_LOCK}: cargo fetch --locked (every platform's packages, for "
                                f"the metadata check) failed: {r.stderr.strip()[-400:]}")
                return problems
            r = subprocess.run(["cargo", "metadata", "--locked", "--offline", "--format-version", "1",
                                "--manifest-path", os.path.join(ws, "Cargo.toml")],
                               cwd=ws, capture_output=True, text=True)
            if r.returncode != 0:
                problems.append(f"{BAZEL_LOCK}: cargo metadata --locked rejects it for the workspace "
                                f"without the [patch]: {r.stderr.strip()[-400:]}")
    return problems


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=("generate", "check"))
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--crate", help="crates.io's h2-<version>.crate (default: cargo's registry cache)")
    ap.add_argument("--no-cargo", action="store_true", help="check: skip the cargo metadata step")
    args = ap.parse_args(argv[1:])
    root = os.path.abspath(args.root)
    try:
        if args.command == "generate":
            generate(root, args.crate)
            return 0
        problems = check(root, args.crate, not args.no_cargo)
    except (Problem, OSError, tarfile.TarError) as e:
        print(f"h2 patch: FAIL {e}")
        return 1
    for p in problems:
        print(f"h2 patch: FAIL {p}")
    if problems:
        return 1
    print(f"h2 patch: ok ({PATCH} turns crates.io's {CRATE} into {VENDORED}; {BAZEL_LOCK} matches "
          f"{CARGO_LOCK} but for {CRATE}'s source)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
