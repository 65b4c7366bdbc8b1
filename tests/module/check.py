#!/usr/bin/env python3
"""Static check of the clonestage Bazel module: would it load as a dependency?

Contract: `python3 tests/module/check.py [ROOT]` (ROOT defaults to this
checkout) reads the tree, runs no Bazel, needs no network, and exits 0 when
every check passes, 1 with one line per problem otherwise (2 on bad usage).
It is cheap (well under a second) and is one step of tests/run.sh.

Why: Bazel 4.2.3 (the only Bazel here) never loads the module as a bzlmod
dependency, so the ways it breaks for consumers on Bazel 7/8/9 must be caught
by reading. Checks:

1. ignored labels: no label that the module's files reference (MODULE.bazel,
   BUILD files and .bzl files of the main repository outside ignored or nested
   workspaces, the `@clonestage//` targets of .bcr/presubmit.yml) lies under a
   path of .bazelignore. Bazel applies an external repository's .bazelignore
   too, so such a package is "no such package" for every consumer. Each
   label's package must also exist (a BUILD file, not inside a nested
   workspace) and a file target must not cross into a subpackage.
2. crate universe name: every `crate.from_cargo`/`from_specs` of rules_rust's
   crate_universe extension names its hub, and not `crates` (rules_rust's
   default): the extension sees all modules' tags together and fails with
   "Defined two crate universes with the same name" for a user with their own.
3. empty globs: a `glob()` in a BUILD file that matches nothing in the tree
   says `allow_empty = True` (Bazel 8 defaults
   --incompatible_disallow_empty_glob).
4. visible repositories: every `@repo//` label in those files names a
   repository the module can see as a dependency: a non-dev `bazel_dep`, a
   `use_repo` name, `bazel_tools` or the module itself. A dev_dependency (such
   as googletest) is invisible when the module is not the root, so
   `@clonestage//...` would fail for consumers.
5. path patches: no `[patch]` with a `path` in the manifests crate_universe
   reads. rules_rust 0.63.0 (and its main branch of 2026-08) renders such a
   crate as local_crate_mirror at <ROOT MODULE's directory>/<workspace
   prefix>/<path> (metadata_annotation.rs, "rebase to Bazel root"; the
   extension passes @@//'s directory) and reads its Cargo.toml at fetch time:
   right when clonestage is the root module, a missing file in a consumer's
   workspace. (h2's patch went this way until it moved to .cargo/config.toml,
   which crate_universe's splicer deletes, plus check 7.)
6. one version: MODULE.bazel's module version equals the Cargo workspace
   members' versions (rust/*/Cargo.toml, through [workspace.package]),
   rust/BUILD.bazel's VERSION, and tools/bazel's `cs_version=` line when that
   line exists (it is reported, not failed, when absent).
7. crate_universe's lockfile: a crate that Cargo.lock takes from a path
   [patch] outside the manifests (no `source`, not a workspace member; cargo
   reads such a patch from .cargo/config.toml) must not reach crate_universe
   that way. Its `cargo_lockfile` is then another file, equal to Cargo.lock but
   for those crates, which come from crates.io (source and checksum), and each
   such crate has a `crate.annotation` with `patches` (files that exist) for
   its version. rust/third_party/h2_patch.py check verifies the patch's
   content against the vendored tree; this check, that the pieces are wired.
9. dev-only packages: a BUILD file that loads a .bzl of a dev-only repository
   (a dev_dependency, or a repository of a dev extension usage: rules_rust and
   its crate hub) makes a package only this module as the root can load, like
   //rust. Inside it, dev labels are allowed; a label into it from any other package,
   .bzl file or .bcr/presubmit.yml is not: Bazel ignores a non-root module's
   dev dependencies (MODULE.bazel cites where), so the consumer's build fails
   there.
10. registry files: .bcr/presubmit.yml parses as YAML and its tasks are what
   the registry's presubmit reads; the two JSON templates parse and match the
   registry's schema (tests/module/bcr_files.py, which cites each rule).
11. the binaries table: private/binaries_table.bzl is empty in a git checkout
   (tools/release.sh fills it only in a release's source archive) and, when
   filled, names MODULE.bazel's version and one URL and a sha256 (64 hex
   digits) per known platform, each URL's file clonestage-<tag>-<triple>.tar.gz.
12. the Rust a build gets: rules_rust is a dev_dependency (consumers get
   prebuilt helpers or cargo's, and carry no rules_rust: MODULE.bazel),
   tools/release.sh builds with exactly the default Rust of that rules_rust
   version (RULES_RUST_DEFAULT_RUST, read from rules_rust's
   rust/private/common.bzl at each tag), and rust/Cargo.toml's rust-version is
   no newer than it.
8. workspace members: every member of the Cargo workspace in rust/ is one
   of crate_universe's `manifests` (`//rust:<member>/Cargo.toml`: cargo-bazel
   refuses a workspace whose members it is not given, and check 7 would
   mistake the missing crate for a path patch) and has a rules_rust target in
   rust/BUILD.bazel built from its sources (`crate_root` or `srcs` under
   `<member>/src/`), so a crate added to Cargo (e.g. rust/bench) is not
   silently missing from the Bazel build.
"""

import ast
import fnmatch
import os
import re
import sys
import tomllib

import bcr_files

DEFAULT_CRATE_UNIVERSE = "crates"
# DEFAULT_RUST_VERSION of bazelbuild/rules_rust rust/private/common.bzl (line 34) at each tag.
RULES_RUST_DEFAULT_RUST = {
    "0.63.0": "1.86.0", "0.64.0": "1.86.0", "0.65.0": "1.86.0", "0.66.0": "1.86.0",
    "0.67.0": "1.86.0", "0.68.0": "1.86.0", "0.68.1": "1.86.0", "0.69.0": "1.93.1",
    "0.70.0": "1.95.0", "0.71.0": "1.96.0", "0.71.3": "1.96.1", "0.72.0": "1.97.1",
    "0.73.0": "1.97.1",
}
MODULE_NAME = "clonestage"
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"
REPO_MARKERS = ("WORKSPACE", "WORKSPACE.bazel", "MODULE.bazel", "REPO.bazel")
BUILD_NAMES = ("BUILD.bazel", "BUILD")
# A label in a string literal: //pkg, //pkg:name, :name, @clonestage//..., @//...
LABEL_RE = re.compile(r'^(?:@@?(?P<repo>[A-Za-z0-9_.~+-]*))?(?P<abs>//)(?P<pkg>[^:]*)(?::(?P<name>.+))?$')


class Checker:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.problems = []
        self.notes = []
        self.ignored = self._read_bazelignore()

    # ---- helpers -------------------------------------------------------
    def problem(self, where, text):
        self.problems.append(f"{where}: {text}")

    def rel(self, path):
        return os.path.relpath(path, self.root)

    def _read_bazelignore(self):
        path = os.path.join(self.root, ".bazelignore")
        prefixes = []
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    line = line.rstrip("\n")
                    # Bazel: whole-line comments only, no wildcards, paths from the root.
                    if line and not line.startswith("#"):
                        prefixes.append(line.strip("/"))
        return prefixes

    def ignored_prefix(self, relpath):
        for prefix in self.ignored:
            if relpath == prefix or relpath.startswith(prefix + "/"):
                return prefix
        return None

    def nested_repo(self, reldir):
        """The nested workspace (a directory with its own WORKSPACE etc.) holding reldir, if any."""
        parts = [p for p in reldir.split("/") if p and p != "."]
        for i in range(1, len(parts) + 1):
            d = os.path.join(self.root, *parts[:i])
            if any(os.path.isfile(os.path.join(d, m)) for m in REPO_MARKERS):
                return "/".join(parts[:i])
        return None

    def has_build(self, reldir):
        d = os.path.join(self.root, reldir)
        return any(os.path.isfile(os.path.join(d, b)) for b in BUILD_NAMES)

    def module_files(self):
        """MODULE.bazel and the main repository's BUILD/.bzl files a consumer can load."""
        files = []
        if os.path.isfile(os.path.join(self.root, "MODULE.bazel")):
            files.append("MODULE.bazel")
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = self.rel(dirpath)
            rel = "" if rel == "." else rel
            keep = []
            for d in sorted(dirnames):
                sub = f"{rel}/{d}" if rel else d
                if d.startswith(".") or d.startswith("bazel-"):
                    continue
                if self.ignored_prefix(sub) or self.nested_repo(sub):
                    continue
                keep.append(d)
            dirnames[:] = keep
            for name in sorted(filenames):
                if name in BUILD_NAMES or name.endswith(".bzl"):
                    files.append(f"{rel}/{name}" if rel else name)
        return files

    # ---- 1. labels -----------------------------------------------------
    def string_literals(self, relfile):
        with open(os.path.join(self.root, relfile), encoding="utf-8") as f:
            text = f.read()
        try:
            tree = ast.parse(text, filename=relfile)
        except SyntaxError as e:
            self.problem(relfile, f"cannot parse as Starlark: {e}")
            return []
        return [(n.value, n.lineno) for n in ast.walk(tree)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)]

    def visible_repos(self):
        """(non-dev repos, dev-only repos) of MODULE.bazel as a consumer sees them."""
        if hasattr(self, "_visible"):
            return self._visible
        visible, dev = {"bazel_tools", MODULE_NAME, ""}, set()
        path = os.path.join(self.root, "MODULE.bazel")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename="MODULE.bazel")
            dev_extensions = set()
            for node in ast.walk(tree):
                if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                        and getattr(node.value.func, "id", None) == "use_extension"
                        and any(k.arg == "dev_dependency" and isinstance(k.value, ast.Constant)
                                and k.value.value is True for k in node.value.keywords)):
                    dev_extensions.update(t.id for t in node.targets if isinstance(t, ast.Name))
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                fn = getattr(node.func, "id", None)
                kw = {k.arg: k.value for k in node.keywords}
                is_dev = isinstance(kw.get("dev_dependency"), ast.Constant) and kw["dev_dependency"].value is True
                if fn == "bazel_dep" and isinstance(kw.get("name"), ast.Constant):
                    name = kw["repo_name"].value if isinstance(kw.get("repo_name"), ast.Constant) else kw["name"].value
                    (dev if is_dev else visible).add(name)
                elif fn == "use_repo":
                    names = {a.value for a in node.args[1:] if isinstance(a, ast.Constant)}
                    names |= set(kw)  # use_repo(ext, alias = "name")
                    ext = node.args[0].id if node.args and isinstance(node.args[0], ast.Name) else None
                    # A dev extension usage is a no-op proxy for a non-root module.
                    (dev if ext in dev_extensions else visible).update(names)
        self._visible = (visible, dev - visible)
        return self._visible

    def dev_packages(self):
        """Packages whose BUILD file names a dev-only repository: {package: repository}."""
        if hasattr(self, "_dev_packages"):
            return self._dev_packages
        _, dev = self.visible_repos()
        found = {}
        for relfile in self.module_files():
            if os.path.basename(relfile) not in BUILD_NAMES:
                continue
            with open(os.path.join(self.root, relfile), encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=relfile)
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "load"
                        and node.args and isinstance(node.args[0], ast.Constant)):
                    continue
                m = LABEL_RE.match(str(node.args[0].value))
                if m and m.group("repo") in dev:
                    found.setdefault(os.path.dirname(relfile), m.group("repo"))
        self._dev_packages = found
        return found

    def check_label(self, where, label, own_package, check_repo=True):
        if any(c in label for c in "{}%$ \n\t"):
            return  # a template ("//{pkg}:x", "%s"), not a label
        m = LABEL_RE.match(label)
        if m:
            repo = m.group("repo")
            if repo not in (None, "", MODULE_NAME):
                visible, dev = self.visible_repos()
                if own_package is not None and own_package in self.dev_packages():
                    return  # a dev-only package may use dev dependencies (check 9)
                if check_repo and label.startswith("@") and not label.startswith("@@") and repo not in visible:
                    why = ("a dev_dependency, invisible when clonestage is not the root module"
                           if repo in dev else "not a bazel_dep or use_repo of MODULE.bazel")
                    self.problem(where, f"label {label!r}: repository @{repo} is {why}")
                return  # another repository's label
            pkg, name = m.group("pkg"), m.group("name")
        elif label.startswith(":") and own_package is not None:
            pkg, name = own_package, label[1:]
        else:
            return
        if pkg in ("visibility", "conditions"):
            return  # //visibility:public, //conditions:default are built into Bazel
        dev_repo = self.dev_packages().get(pkg)
        if dev_repo is not None and own_package != pkg and where.split(":")[0] != "MODULE.bazel":
            self.problem(where, f"label {label!r} is in the dev-only package '{pkg}' (it needs "
                         f"@{dev_repo}, a dev dependency): a consumer cannot load it")
            return
        if name is None:
            name = pkg.rsplit("/", 1)[-1]
        if any(c in pkg for c in " \n\t") or pkg.endswith("..."):
            return  # a target pattern or prose, not a label
        prefix = self.ignored_prefix(pkg)
        if prefix is not None:
            self.problem(where, f"label {label!r} is in package '{pkg}', under '{prefix}' of "
                         ".bazelignore (Bazel applies it to the module as a dependency: "
                         "'no such package' for every consumer)")
            return
        nested = self.nested_repo(pkg)
        if nested is not None:
            self.problem(where, f"label {label!r} is in package '{pkg}', inside the nested "
                         f"workspace '{nested}', not the module's repository")
            return
        if not self.has_build(pkg):
            self.problem(where, f"label {label!r}: no BUILD file in '{pkg or '.'}' (no such package)")
            return
        # A file target must not cross into a subpackage (//rust:cli/Cargo.toml is
        # invalid once rust/cli has a BUILD file).
        parts = name.split("/")
        for i in range(1, len(parts)):
            sub = "/".join(([pkg] if pkg else []) + parts[:i])
            if self.has_build(sub):
                self.problem(where, f"label {label!r} crosses into the subpackage '{sub}'")
                return
        file_ignored = self.ignored_prefix(f"{pkg}/{name}" if pkg else name)
        if file_ignored is not None:
            self.problem(where, f"label {label!r} names a file under '{file_ignored}' of .bazelignore")

    def package_of(self, relfile):
        if os.path.basename(relfile) in BUILD_NAMES:
            d = os.path.dirname(relfile)
            return d
        return None  # .bzl and MODULE.bazel: relative labels resolve elsewhere

    def check_labels(self):
        for relfile in self.module_files():
            pkg = self.package_of(relfile)
            for value, line in self.string_literals(relfile):
                if value.startswith(("//", "@", ":")):
                    # MODULE.bazel names its repositories' extension files (@rules_rust//...)
                    # before they are visible; only BUILD and .bzl labels are checked for that.
                    self.check_label(f"{relfile}:{line}", value, pkg,
                                     check_repo=relfile != "MODULE.bazel")
        presubmit = os.path.join(self.root, ".bcr", "presubmit.yml")
        if os.path.isfile(presubmit):
            with open(presubmit, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    for label in re.findall(r'["\']?(@@?' + MODULE_NAME + r'//[^"\'\s]*)', line):
                        self.check_label(f".bcr/presubmit.yml:{n}", label, None)
                        self.check_target_defined(f".bcr/presubmit.yml:{n}", label)

    def check_target_defined(self, where, label):
        """The registry builds the target: its package must define it (or hold the file)."""
        m = LABEL_RE.match(label)
        if not m or m.group("pkg").endswith("...") or (m.group("name") or "").startswith("all"):
            return
        pkg = m.group("pkg")
        name = m.group("name") or pkg.rsplit("/", 1)[-1]
        if os.path.isfile(os.path.join(self.root, pkg, name)):
            return
        for build in BUILD_NAMES:
            path = os.path.join(self.root, pkg, build)
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    if re.search(r'\bname\s*=\s*"' + re.escape(name) + '"', f.read()):
                        return
        self.problem(where, f"label {label!r}: no target {name!r} in package '{pkg or '.'}'")

    # ---- 2. crate universe name ----------------------------------------
    def check_crate_universe(self):
        path = os.path.join(self.root, "MODULE.bazel")
        if not os.path.isfile(path):
            self.problem("MODULE.bazel", "missing")
            return
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename="MODULE.bazel")
        extension_vars = set()
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and getattr(node.value.func, "id", None) == "use_extension"
                    and node.value.args
                    and isinstance(node.value.args[0], ast.Constant)
                    and "crate_universe" in str(node.value.args[0].value)):
                extension_vars.update(t.id for t in node.targets if isinstance(t, ast.Name))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id in extension_vars
                    and node.func.attr in ("from_cargo", "from_specs")):
                continue
            names = [k.value.value for k in node.keywords
                     if k.arg == "name" and isinstance(k.value, ast.Constant)]
            name = names[0] if names else DEFAULT_CRATE_UNIVERSE
            if name == DEFAULT_CRATE_UNIVERSE:
                how = "is" if names else "defaults to"
                self.problem(f"MODULE.bazel:{node.lineno}",
                             f"crate universe name {how} rules_rust's default {name!r}: a user "
                             "with their own @crates fails with \"Defined two crate universes "
                             "with the same name\"; give it a name of its own")

    # ---- 3. empty globs --------------------------------------------------
    def package_files(self, pkg):
        """Files of package pkg (relative to it), not descending into subpackages,
        nested workspaces or ignored directories, as Bazel's glob does."""
        base = os.path.join(self.root, pkg)
        out = []
        for dirpath, dirnames, filenames in os.walk(base):
            rel = os.path.relpath(dirpath, base)
            rel = "" if rel == "." else rel
            keep = []
            for d in dirnames:
                sub_rel = f"{rel}/{d}" if rel else d
                sub_root_rel = f"{pkg}/{sub_rel}" if pkg else sub_rel
                if self.has_build(sub_root_rel) or self.ignored_prefix(sub_root_rel):
                    continue
                if any(os.path.isfile(os.path.join(dirpath, d, m)) for m in REPO_MARKERS):
                    continue
                keep.append(d)
            dirnames[:] = keep
            out.extend(f"{rel}/{n}" if rel else n for n in filenames)
        return out

    @staticmethod
    def glob_match(pattern, path):
        pp, sp = pattern.split("/"), path.split("/")

        def rec(i, j):
            if i == len(pp):
                return j == len(sp)
            if pp[i] == "**":
                return any(rec(i + 1, k) for k in range(j, len(sp) + 1))
            return j < len(sp) and fnmatch.fnmatchcase(sp[j], pp[i]) and rec(i + 1, j + 1)

        return rec(0, 0)

    def check_globs(self):
        for relfile in self.module_files():
            if os.path.basename(relfile) not in BUILD_NAMES:
                continue
            pkg = os.path.dirname(relfile)
            with open(os.path.join(self.root, relfile), encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=relfile)
            files = None
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "glob"):
                    continue
                kw = {k.arg: k.value for k in node.keywords}
                allow = kw.get("allow_empty")
                if isinstance(allow, ast.Constant) and allow.value is True:
                    continue
                include = node.args[0] if node.args else kw.get("include")
                exclude = kw.get("exclude")
                try:
                    inc = ast.literal_eval(include) if include is not None else []
                    exc = ast.literal_eval(exclude) if exclude is not None else []
                except ValueError:
                    self.notes.append(f"{relfile}:{node.lineno}: glob with computed patterns not checked")
                    continue
                if files is None:
                    files = self.package_files(pkg)
                matched = [p for p in files
                           if any(self.glob_match(i, p) for i in inc)
                           and not any(self.glob_match(e, p) for e in exc)]
                if not matched:
                    self.problem(f"{relfile}:{node.lineno}",
                                 f"glob({inc}, exclude = {exc}) matches nothing and lacks "
                                 "allow_empty = True (an error under Bazel 8's default "
                                 "--incompatible_disallow_empty_glob)")

    # ---- 4. versions -----------------------------------------------------
    def check_versions(self):
        versions = {}
        with open(os.path.join(self.root, "MODULE.bazel"), encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename="MODULE.bazel")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "module":
                for k in node.keywords:
                    if k.arg == "version" and isinstance(k.value, ast.Constant):
                        versions["MODULE.bazel module(version)"] = k.value.value
        cargo_root = os.path.join(self.root, "rust", "Cargo.toml")
        with open(cargo_root, "rb") as f:
            ws = tomllib.load(f)["workspace"]
        ws_version = ws.get("package", {}).get("version")
        for member in ws.get("members", []):
            manifest = os.path.join(self.root, "rust", member, "Cargo.toml")
            with open(manifest, "rb") as f:
                v = tomllib.load(f)["package"].get("version")
            if isinstance(v, dict) and v.get("workspace"):
                v = ws_version
            versions[f"rust/{member}/Cargo.toml"] = v
        build = os.path.join(self.root, "rust", "BUILD.bazel")
        if os.path.isfile(build):
            with open(build, encoding="utf-8") as f:
                m = re.search(r'^VERSION = "([^"]+)"', f.read(), re.M)
            if m:
                versions["rust/BUILD.bazel VERSION"] = m.group(1)
        launcher = os.path.join(self.root, "tools", "bazel")
        found = None
        if os.path.isfile(launcher):
            with open(launcher, encoding="utf-8", errors="replace") as f:
                m = re.search(r'^\s*(?:readonly\s+)?cs_version=["\']?([^"\'\s]+)', f.read(), re.M)
            found = m.group(1) if m else None
        if found is None:
            self.notes.append("tools/bazel has no cs_version= line yet: its version is not checked")
        else:
            versions["tools/bazel cs_version"] = found
        if len(set(versions.values())) > 1:
            listing = ", ".join(f"{k} = {v}" for k, v in versions.items())
            self.problem("version", f"differs between files: {listing}")

    # ---- 5. path patches -------------------------------------------------
    def module_calls(self, attr):
        """Calls `<x>.<attr>(...)` in MODULE.bazel, as {keyword: literal value}."""
        path = os.path.join(self.root, "MODULE.bazel")
        if not os.path.isfile(path):
            return []
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename="MODULE.bazel")
        calls = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == attr:
                kw = {}
                for k in node.keywords:
                    try:
                        kw[k.arg] = ast.literal_eval(k.value)
                    except ValueError:
                        kw[k.arg] = None
                calls.append(kw)
        return calls

    def label_path(self, label):
        """The file a //pkg:name label of this module names, relative to the root."""
        m = LABEL_RE.match(label) if isinstance(label, str) else None
        if not m or not m.group("name") or m.group("repo") not in (None, "", MODULE_NAME):
            return None
        return "/".join(p for p in (m.group("pkg"), m.group("name")) if p)

    def read_toml(self, label):
        rel = self.label_path(label)
        if rel is None:
            self.problem(label, "not a file label of this module")
            return None, None
        try:
            with open(os.path.join(self.root, rel), "rb") as f:
                return rel, tomllib.load(f)
        except (OSError, tomllib.TOMLDecodeError) as e:
            self.problem(label, f"cannot read {rel}: {e}")
            return rel, None

    def check_path_patches(self):
        for cfg in self.module_calls("from_cargo"):
            for label in cfg.get("manifests") or []:
                rel, manifest = self.read_toml(label)
                if manifest is None:
                    continue
                for registry, patches in manifest.get("patch", {}).items():
                    for crate, spec in patches.items():
                        if isinstance(spec, dict) and "path" in spec:
                            self.problem(f"{rel} [patch.{registry}] {crate}",
                                         f"path patch {spec['path']!r}: crate_universe resolves it "
                                         "in the root module's directory, so the rules_rust build "
                                         "breaks for every consumer (patch it in .cargo/config.toml "
                                         "and give crate_universe a patch file: check 7)")

    # ---- 7. crate_universe's lockfile -------------------------------------
    def check_crate_lockfile(self):
        annotations = self.module_calls("annotation")
        for cfg in self.module_calls("from_cargo"):
            where = f"MODULE.bazel from_cargo {cfg.get('name')!r}"
            manifests = cfg.get("manifests") or []
            members, root_dir = set(), None
            for label in manifests:
                rel, manifest = self.read_toml(label)
                if manifest is None:
                    continue
                if "package" in manifest:
                    members.add(manifest["package"].get("name"))
                if "workspace" in manifest:
                    root_dir = os.path.dirname(rel)
            if root_dir is None or not cfg.get("cargo_lockfile"):
                continue
            cargo_lock_rel = "/".join(p for p in (root_dir, "Cargo.lock") if p)
            try:
                with open(os.path.join(self.root, cargo_lock_rel), "rb") as f:
                    cargo_pkgs = tomllib.load(f).get("package", [])
            except (OSError, tomllib.TOMLDecodeError) as e:
                self.problem(where, f"cannot read {cargo_lock_rel}: {e}")
                continue
            patched = {(p["name"], p["version"]) for p in cargo_pkgs
                       if "source" not in p and p["name"] not in members}
            bazel_rel, bazel = self.read_toml(cfg["cargo_lockfile"])
            if bazel is None:
                continue
            if bazel_rel == cargo_lock_rel:
                for name, version in sorted(patched):
                    self.problem(where, f"{cargo_lock_rel} takes {name} {version} from a path "
                                 "[patch] (no source), and crate_universe reads that lockfile: it "
                                 "would re-resolve or rebase the crate; give it a lockfile with "
                                 f"{name} from crates.io and a crate.annotation patch")
                continue
            by_key = lambda pkgs: {(p["name"], p["version"], p.get("source")): p for p in pkgs}
            want = []
            for p in cargo_pkgs:
                if (p["name"], p["version"]) in patched:
                    p = dict(p, source=CRATES_IO)
                want.append(p)
            have = bazel.get("package", [])
            want_k, have_k = by_key(want), by_key(have)
            for key in sorted(set(want_k) | set(have_k), key=str):
                a, b = want_k.get(key), have_k.get(key)
                if (key[0], key[1]) in patched and a and b:
                    a = dict(a, checksum=b.get("checksum"))
                    if not b.get("checksum"):
                        self.problem(bazel_rel, f"{key[0]} {key[1]} from crates.io has no checksum")
                if a != b:
                    self.problem(bazel_rel, f"differs from {cargo_lock_rel} at {key[0]} {key[1]} "
                                 f"({'missing' if b is None else 'extra' if a is None else 'changed'}): "
                                 "regenerate it (python3 rust/third_party/h2_patch.py generate)")
            for name, version in sorted(patched):
                found = False
                for ann in annotations:
                    if ann.get("crate") != name:
                        continue
                    repos = ann.get("repositories") or []
                    if repos and cfg.get("name") not in repos:
                        continue
                    if ann.get("version", "*") not in ("*", version, "=" + version):
                        continue
                    found = bool(ann.get("patches"))
                    for label in ann.get("patches") or []:
                        rel = self.label_path(label)
                        if rel is None or not os.path.isfile(os.path.join(self.root, rel)):
                            self.problem(f"MODULE.bazel annotation {name}", f"patch {label!r}: no such file")
                if not found:
                    self.problem(where, f"{name} {version} is path-patched for cargo "
                                 f"({cargo_lock_rel}) but no crate.annotation(crate = {name!r}, "
                                 f"version = '={version}', patches = [...]) gives crate_universe "
                                 "the same change")

    # ---- 8. workspace members ------------------------------------------------
    RUST_RULES = ("rust_library", "rust_binary", "rust_proc_macro", "rust_shared_library",
                  "rust_static_library")

    def build_crate_sources(self, relfile):
        """Per rules_rust target of a BUILD file: its name and the crate_root/srcs strings."""
        path = os.path.join(self.root, relfile)
        if not os.path.isfile(path):
            return []
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=relfile)
        targets = []
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) in self.RUST_RULES):
                continue
            name, paths = None, []
            for k in node.keywords:
                if k.arg == "name" and isinstance(k.value, ast.Constant):
                    name = k.value.value
                if k.arg in ("crate_root", "srcs"):
                    paths += [n.value for n in ast.walk(k.value)
                              if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            targets.append((name, paths))
        return targets

    def check_members(self):
        cargo_root = os.path.join(self.root, "rust", "Cargo.toml")
        if not os.path.isfile(cargo_root):
            return
        with open(cargo_root, "rb") as f:
            members = tomllib.load(f).get("workspace", {}).get("members", [])
        listed = set()
        for cfg in self.module_calls("from_cargo"):
            listed |= {self.label_path(l) for l in cfg.get("manifests") or []}
        targets = self.build_crate_sources("rust/BUILD.bazel")
        for member in members:
            manifest = f"rust/{member}/Cargo.toml"
            if not listed:
                pass  # no crate_universe in MODULE.bazel: nothing to keep in step
            elif manifest not in listed:
                self.problem(manifest, "a Cargo workspace member missing from crate.from_cargo's "
                             f"manifests in MODULE.bazel (add \"//rust:{member}/Cargo.toml\")")
            prefix = f"{member}/src/"
            if not any(p.startswith(prefix) for _, ps in targets for p in ps):
                self.problem(manifest, "a Cargo workspace member with no rules_rust target in "
                             f"rust/BUILD.bazel built from {prefix} (crate_root or srcs)")

    # ---- 10. registry files ----------------------------------------------
    def check_registry_files(self):
        if not os.path.isdir(os.path.join(self.root, ".bcr")):
            return
        for p in bcr_files.problems(self.root):
            self.problems.append(p)

    # ---- 11. the binaries table -------------------------------------------
    TABLE = "private/binaries_table.bzl"
    TRIPLES = {"x86_64-unknown-linux-gnu", "aarch64-unknown-linux-gnu",
               "x86_64-apple-darwin", "aarch64-apple-darwin"}

    def check_binaries_table(self):
        path = os.path.join(self.root, self.TABLE)
        if not os.path.isfile(path):
            return
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=self.TABLE)
        values = {t.id: ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                  for t in n.targets if isinstance(t, ast.Name)}
        version = values.get("CLONESTAGE_BINARIES_VERSION", "")
        urls = values.get("CLONESTAGE_BINARY_URLS", {})
        sums = values.get("CLONESTAGE_BINARY_SHA256S", {})
        if os.path.exists(os.path.join(self.root, ".git")):
            if version or urls or sums:
                self.problem(self.TABLE, "filled in a git checkout: tools/release.sh writes the "
                             "table into the release's source archive only; commit it empty")
            return
        if not version:
            if urls or sums:
                self.problem(self.TABLE, "archives listed with no CLONESTAGE_BINARIES_VERSION")
            return
        module_version = self.module_version()
        if version != module_version:
            self.problem(self.TABLE, f"for version {version}, but MODULE.bazel says {module_version}")
        if set(urls) != set(sums):
            self.problem(self.TABLE, f"URLs for {sorted(urls)} but sha256s for {sorted(sums)}")
        for triple in sorted(set(urls) | set(sums)):
            if triple not in self.TRIPLES:
                self.problem(self.TABLE, f"unknown platform {triple!r}")
            if not re.fullmatch(r"[0-9a-f]{64}", sums.get(triple, "")):
                self.problem(self.TABLE, f"{triple}: sha256 {sums.get(triple)!r} is not 64 hex digits")
            name = urls.get(triple, "").rsplit("/", 1)[-1]
            if not re.fullmatch(r"clonestage-v?" + re.escape(version) + "-" + re.escape(triple)
                                + r"\.tar\.gz", name):
                self.problem(self.TABLE, f"{triple}: URL's file {name!r} is not "
                             f"clonestage-<tag>-{triple}.tar.gz")

    # ---- 12. the Rust a build gets -------------------------------------------
    def check_rust_versions(self):
        path = os.path.join(self.root, "MODULE.bazel")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename="MODULE.bazel")
        dep = None
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "bazel_dep":
                kw = {k.arg: k.value for k in node.keywords}
                if isinstance(kw.get("name"), ast.Constant) and kw["name"].value == "rules_rust":
                    dep = (kw, node.lineno)
        if dep is None:
            return
        kw, line = dep
        where = f"MODULE.bazel:{line}"
        if not (isinstance(kw.get("dev_dependency"), ast.Constant) and kw["dev_dependency"].value is True):
            self.problem(where, "rules_rust is not a dev_dependency: every consumer's graph would "
                         "carry it (and push rules_rust, apple_support, rules_cc up by MVS)")
        rules_rust = kw["version"].value if isinstance(kw.get("version"), ast.Constant) else ""
        default = RULES_RUST_DEFAULT_RUST.get(rules_rust)
        if default is None:
            self.problem(where, f"rules_rust {rules_rust}: its default Rust is not in "
                         "RULES_RUST_DEFAULT_RUST (read rust/private/common.bzl at that tag)")
            return
        release = os.path.join(self.root, "tools", "release.sh")
        if os.path.isfile(release):
            with open(release, encoding="utf-8") as f:
                m = re.search(r"^RUST=(\S+)$", f.read(), re.M)
            if not m or m.group(1) != default:
                self.problem("tools/release.sh", f"RUST={m.group(1) if m else '?'}, but the dev "
                             f"rules_rust {rules_rust} registers Rust {default} by default")
        with open(os.path.join(self.root, "rust", "Cargo.toml"), "rb") as f:
            msrv = tomllib.load(f).get("workspace", {}).get("package", {}).get("rust-version", "")
        def parts(v):
            return tuple(int(x) for x in v.split("."))
        if not msrv:
            self.problem("rust/Cargo.toml", "no [workspace.package] rust-version")
        elif parts(msrv) > parts(default):
            self.problem("rust/Cargo.toml", f"rust-version {msrv} is newer than the dev rules_rust's "
                         f"default Rust {default}")

    def module_version(self):
        with open(os.path.join(self.root, "MODULE.bazel"), encoding="utf-8") as f:
            m = re.search(r'module\((?:[^)]*?)version\s*=\s*"([^"]+)"', f.read(), re.S)
        return m.group(1) if m else ""

    def run(self):
        for check in (self.check_path_patches, self.check_labels, self.check_crate_universe,
                      self.check_globs, self.check_versions, self.check_crate_lockfile,
                      self.check_members, self.check_registry_files, self.check_binaries_table,
                      self.check_rust_versions):
            try:
                check()
            except (OSError, SyntaxError, KeyError, tomllib.TOMLDecodeError) as e:
                self.problem(check.__name__, f"cannot check: {type(e).__name__}: {e}")
        return self.problems


def main(argv):
    if len(argv) > 2:
        print("usage: check.py [ROOT]", file=sys.stderr)
        return 2
    root = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    checker = Checker(root)
    problems = checker.run()
    for note in checker.notes:
        print(f"note: {note}")
    for p in problems:
        print(f"FAIL {p}")
    if problems:
        print(f"module check: {len(problems)} problem(s) in {os.path.abspath(root)}")
        return 1
    print("module check: ok (labels not ignored, repositories visible, crate universe named, no empty glob, no path patch, crate_universe lockfile wired, one version, every Cargo member in Bazel, dev-only packages unreferenced, registry files as the registry reads them, binaries table, rules_rust dev-only with its default Rust)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
