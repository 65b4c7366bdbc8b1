#!/usr/bin/env python3
"""Tests of tests/module/check.py on small fixture trees (not this checkout).

Contract: `python3 tests/module/check_test.py` exits 0 when every case passes.
Each case starts from a minimal module that passes the check and breaks one
thing, so every check is shown to fail on the mistake it exists for (the two
module blockers of issue 11 among them) and to pass once it is fixed.
"""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402

GOOD = {
    ".bazelignore": "# nested workspaces\nexamples\n",
    "MODULE.bazel": '''module(name = "clonestage", version = "0.1.0")

bazel_dep(name = "rules_rust", version = "0.63.0")
bazel_dep(name = "googletest", version = "1.15.2", dev_dependency = True)

crate = use_extension("@rules_rust//crate_universe:extensions.bzl", "crate")
crate.from_cargo(
    name = "clonestage_crates",
    cargo_lockfile = "//rust:Cargo.lock",
    manifests = ["//rust:Cargo.toml", "//rust:cli/Cargo.toml"],
)
use_repo(crate, "clonestage_crates")
''',
    "BUILD.bazel": '''alias(
    name = "clonestage",
    actual = "//rust:clonestage",
    visibility = ["//visibility:public"],
)
''',
    "rust/BUILD.bazel": '''load("@clonestage_crates//:defs.bzl", "all_crate_deps")
load("@rules_rust//rust:defs.bzl", "rust_binary")

VERSION = "0.1.0"

rust_binary(
    name = "clonestage",
    srcs = glob(["cli/src/**/*.rs"]),
    compile_data = glob(["cli/src/**"], allow_empty = True, exclude = ["cli/src/**/*.rs"]),
    deps = all_crate_deps(package_name = "rust/cli"),
)
''',
    "rust/Cargo.toml": '[workspace]\nmembers = ["cli"]\n\n[workspace.package]\nversion = "0.1.0"\n',
    "rust/Cargo.lock": "",
    "rust/cli/Cargo.toml": '[package]\nname = "clonestage"\nversion.workspace = true\n',
    "rust/cli/src/main.rs": "fn main() {}\n",
    "examples/app/WORKSPACE": "",
    "examples/app/BUILD.bazel": 'alias(name = "x", actual = "@clonestage//:clonestage")\n',
    ".bcr/presubmit.yml": 'tasks:\n  verify:\n    build_targets:\n      - "@clonestage//:clonestage"\n',
}


LOCK_HEAD = 'version = 4\n\n[[package]]\nname = "bytes"\nversion = "1.0.0"\nsource = "registry+https://github.com/rust-lang/crates.io-index"\nchecksum = "aa"\n\n[[package]]\nname = "clonestage"\nversion = "0.1.0"\n\n'
LOCK_PATCHED = LOCK_HEAD + '[[package]]\nname = "h2"\nversion = "0.4.20"\n'
LOCK_BAZEL = LOCK_HEAD + ('[[package]]\nname = "h2"\nversion = "0.4.20"\n'
                          'source = "registry+https://github.com/rust-lang/crates.io-index"\nchecksum = "bb"\n')
PATCHED_SETUP = {
    "rust/Cargo.lock": LOCK_PATCHED,
    "rust/Cargo.bazel.lock": LOCK_BAZEL,
    "rust/third_party/h2-authority.patch": "--- a/src/lib.rs\n+++ b/src/lib.rs\n",
    "MODULE.bazel": GOOD["MODULE.bazel"].replace('"//rust:Cargo.lock"', '"//rust:Cargo.bazel.lock"').replace(
        'use_repo(crate, "clonestage_crates")\n',
        'crate.annotation(\n    crate = "h2",\n    patch_args = ["-p1"],\n'
        '    patches = ["//rust:third_party/h2-authority.patch"],\n'
        '    repositories = ["clonestage_crates"],\n    version = "=0.4.20",\n)\n'
        'use_repo(crate, "clonestage_crates")\n'),
}


class CheckTest(unittest.TestCase):
    def run_check(self, changes=None, removed=()):
        files = dict(GOOD)
        files.update(changes or {})
        with tempfile.TemporaryDirectory() as root:
            for rel, text in files.items():
                if rel in removed:
                    continue
                path = os.path.join(root, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            return check.Checker(root).run()

    def assert_one_problem(self, problems, *words):
        self.assertTrue(problems, "the check passed a broken module")
        joined = "\n".join(problems)
        for word in words:
            self.assertIn(word, joined)

    BENCH_MEMBER = {
        "rust/Cargo.toml": GOOD["rust/Cargo.toml"].replace('["cli"]', '["cli", "bench"]'),
        "rust/bench/Cargo.toml": '[package]\nname = "clonestage-bench"\nversion.workspace = true\n',
        "rust/bench/src/lib.rs": "//! bench\n",
        "MODULE.bazel": GOOD["MODULE.bazel"].replace(
            '"//rust:cli/Cargo.toml"]', '"//rust:cli/Cargo.toml", "//rust:bench/Cargo.toml"]'),
        "rust/BUILD.bazel": GOOD["rust/BUILD.bazel"].replace(
            '"rust_binary")', '"rust_binary", "rust_library")') + \
            'rust_library(\n    name = "clonestage_bench",\n    srcs = glob(["bench/src/**/*.rs"]),\n'
            '    crate_root = "bench/src/lib.rs",\n)\n',
    }

    def test_second_member_with_manifest_and_target_passes(self):
        self.assertEqual(self.run_check(self.BENCH_MEMBER), [])

    def test_member_missing_from_crate_universe_manifests_fails(self):
        changes = dict(self.BENCH_MEMBER, **{"MODULE.bazel": GOOD["MODULE.bazel"]})
        self.assert_one_problem(self.run_check(changes), "rust/bench/Cargo.toml",
                                "missing from crate.from_cargo's manifests")

    def test_member_without_a_rules_rust_target_fails(self):
        changes = dict(self.BENCH_MEMBER, **{"rust/BUILD.bazel": GOOD["rust/BUILD.bazel"]})
        self.assert_one_problem(self.run_check(changes), "rust/bench/Cargo.toml",
                                "no rules_rust target", "bench/src/")

    def test_good_module_passes(self):
        self.assertEqual(self.run_check(), [])

    def test_ignored_rust_package_fails(self):
        # Blocker 1 of issue 11: .bazelignore listed rust.
        problems = self.run_check({".bazelignore": "examples\nrust\n"})
        self.assert_one_problem(problems, "'//rust:Cargo.lock'", "'//rust:clonestage'", "under 'rust'")

    def test_presubmit_target_in_ignored_package_fails(self):
        problems = self.run_check({".bcr/presubmit.yml": 'build_targets:\n  - "@clonestage//examples/app:x"\n'})
        self.assert_one_problem(problems, ".bcr/presubmit.yml:2", "under 'examples'")

    def test_default_crate_universe_name_fails(self):
        # Blocker 2 of issue 11: crate.from_cargo(name = "crates").
        module = GOOD["MODULE.bazel"].replace('name = "clonestage_crates"', 'name = "crates"')
        self.assert_one_problem(self.run_check({"MODULE.bazel": module}), "rules_rust's default 'crates'")

    def test_unnamed_crate_universe_fails(self):
        module = GOOD["MODULE.bazel"].replace('    name = "clonestage_crates",\n', "")
        self.assert_one_problem(self.run_check({"MODULE.bazel": module}), "defaults to rules_rust's default")

    def test_empty_glob_without_allow_empty_fails(self):
        build = GOOD["rust/BUILD.bazel"].replace("allow_empty = True, ", "")
        self.assert_one_problem(self.run_check({"rust/BUILD.bazel": build}), "matches nothing", "allow_empty")

    def test_glob_matching_files_needs_no_allow_empty(self):
        build = GOOD["rust/BUILD.bazel"].replace("allow_empty = True, ", "")
        self.assertEqual(self.run_check({"rust/BUILD.bazel": build, "rust/cli/src/data.txt": "x"}), [])

    def test_glob_does_not_see_into_subpackages(self):
        # rust/cli/src has a BUILD file: its .rs files are not rust's.
        problems = self.run_check({"rust/cli/src/BUILD.bazel": ""})
        self.assert_one_problem(problems, "glob(['cli/src/**/*.rs']", "matches nothing")

    def test_templates_and_prose_are_not_labels(self):
        bzl = '_T = "//{pkg}:{name}"\n_U = "@%s//:x" % "r"\n_V = ":"\n_W = "// a comment-like string"\n'
        self.assertEqual(self.run_check({"rust/macros.bzl": bzl}), [])

    def test_bzl_label_under_ignored_path_fails(self):
        bzl = 'X = Label("//examples/app:x")\n'
        self.assert_one_problem(self.run_check({"rust/macros.bzl": bzl}), "rust/macros.bzl:1", "under 'examples'")

    def test_dev_dependency_label_fails(self):
        build = GOOD["rust/BUILD.bazel"] + 'cc_test(name = "t", deps = ["@googletest//:gtest"])\n'
        self.assert_one_problem(self.run_check({"rust/BUILD.bazel": build}), "@googletest is a dev_dependency")

    def test_label_in_missing_package_fails(self):
        self.assert_one_problem(self.run_check(removed=("rust/BUILD.bazel",)), "no such package")

    def test_label_crossing_subpackage_fails(self):
        problems = self.run_check({"rust/cli/BUILD.bazel": ""})
        self.assert_one_problem(problems, "'//rust:cli/Cargo.toml' crosses into the subpackage 'rust/cli'")

    def test_path_patch_fails(self):
        cargo = GOOD["rust/Cargo.toml"] + '\n[patch.crates-io]\nh2 = { path = "third_party/h2" }\n'
        self.assert_one_problem(self.run_check({"rust/Cargo.toml": cargo}), "[patch.crates-io] h2")

    def test_sourceless_crate_in_crate_universe_lockfile_fails(self):
        # h2 patched by .cargo/config.toml, and crate_universe given that very Cargo.lock.
        problems = self.run_check({"rust/Cargo.lock": LOCK_PATCHED})
        self.assert_one_problem(problems, "takes h2 0.4.20 from a path [patch]")

    def test_bazel_lockfile_and_patch_annotation_pass(self):
        self.assertEqual(self.run_check(PATCHED_SETUP), [])

    def test_drifted_bazel_lockfile_fails(self):
        drifted = dict(PATCHED_SETUP)
        drifted["rust/Cargo.bazel.lock"] = LOCK_BAZEL.replace('version = "1.0.0"', 'version = "1.0.1"')
        self.assert_one_problem(self.run_check(drifted), "differs from rust/Cargo.lock at bytes")

    def test_bazel_lockfile_without_crates_io_h2_fails(self):
        setup = dict(PATCHED_SETUP, **{"rust/Cargo.bazel.lock": LOCK_PATCHED})
        self.assert_one_problem(self.run_check(setup), "differs from rust/Cargo.lock at h2 0.4.20")

    def test_patched_crate_without_annotation_fails(self):
        module = PATCHED_SETUP["MODULE.bazel"].split("crate.annotation(")[0]
        setup = dict(PATCHED_SETUP, **{"MODULE.bazel": module + 'use_repo(crate, "clonestage_crates")\n'})
        self.assert_one_problem(self.run_check(setup), "no crate.annotation(crate = 'h2'")

    def test_annotation_patch_file_missing_fails(self):
        problems = self.run_check(PATCHED_SETUP, removed=("rust/third_party/h2-authority.patch",))
        self.assert_one_problem(problems, "patch '//rust:third_party/h2-authority.patch': no such file")

    def test_this_checkout_passes_with_no_known_blocker(self):
        # Before h2's patch moved out of rust/Cargo.toml this checkout passed only with a
        # "KNOWN BLOCKER" note for it (the rules_rust build failed for consumers).
        root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
        checker = check.Checker(root)
        self.assertEqual(checker.run(), [])
        self.assertFalse([n for n in checker.notes if "BLOCKER" in n], checker.notes)

    def test_version_mismatch_fails(self):
        cargo = GOOD["rust/Cargo.toml"].replace('"0.1.0"', '"0.2.0"')
        self.assert_one_problem(self.run_check({"rust/Cargo.toml": cargo}), "rust/cli/Cargo.toml = 0.2.0")

    def test_launcher_version_checked_when_present(self):
        self.assertEqual(self.run_check({"tools/bazel": "#!/bin/sh\ncs_version=0.1.0\n"}), [])
        problems = self.run_check({"tools/bazel": "#!/bin/sh\ncs_version=0.0.9\n"})
        self.assert_one_problem(problems, "tools/bazel cs_version = 0.0.9")


if __name__ == "__main__":
    unittest.main()
