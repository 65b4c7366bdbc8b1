#!/usr/bin/env python3
"""Tests of tests/module/check.py on small fixture trees (not this checkout).

Contract: `python3 tests/module/check_test.py` exits 0 when every case passes.
Each case starts from a minimal module that passes the check and breaks one
thing, so every check is shown to fail on the mistake it exists for (the two
module blockers of issue 11 among them) and to pass once it is fixed.
"""

import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402

PRESUBMIT = """matrix:
  platform:
    - debian11
    - macos_arm64
  bazel:
    - 7.x
    - 9.x
tasks:
  verify:
    platform: ${{ platform }}
    bazel: ${{ bazel }}
    build_targets:
      - "@clonestage//:spawn"
bcr_test_module:
  module_path: examples/app
  matrix:
    platform: [debian11]
    bazel: [8.x]
  tasks:
    run:
      platform: ${{ platform }}
      bazel: ${{ bazel }}
      test_targets:
        - "//..."
"""

SHA = "ab" * 32
TABLE = ('CLONESTAGE_BINARIES_VERSION = "0.1.0"\n'
         'CLONESTAGE_BINARY_URLS = {"aarch64-apple-darwin": "https://x/v0.1.0/clonestage-v0.1.0-aarch64-apple-darwin.tar.gz"}\n'
         'CLONESTAGE_BINARY_SHA256S = {"aarch64-apple-darwin": "%s"}\n' % SHA)
EMPTY_TABLE = ('CLONESTAGE_BINARIES_VERSION = ""\nCLONESTAGE_BINARY_URLS = {}\n'
               'CLONESTAGE_BINARY_SHA256S = {}\n')

GOOD = {
    ".bazelignore": "# nested workspaces\nexamples\n",
    "MODULE.bazel": '''module(name = "clonestage", version = "0.1.0")

bazel_dep(name = "rules_rust", version = "0.70.0", dev_dependency = True)
bazel_dep(name = "googletest", version = "1.15.2", dev_dependency = True)

crate = use_extension("@rules_rust//crate_universe:extensions.bzl", "crate", dev_dependency = True)
crate.from_cargo(
    name = "clonestage_crates",
    cargo_lockfile = "//rust:Cargo.lock",
    manifests = ["//rust:Cargo.toml", "//rust:cli/Cargo.toml"],
)
use_repo(crate, "clonestage_crates")
''',
    "BUILD.bazel": '''filegroup(
    name = "spawn",
    srcs = ["README.md"],
    visibility = ["//visibility:public"],
)
''',
    "README.md": "",
    "tools/release.sh": "RUST=1.95.0\n",
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
    "rust/Cargo.toml": '[workspace]\nmembers = ["cli"]\n\n[workspace.package]\nversion = "0.1.0"\nrust-version = "1.88"\n',
    "rust/Cargo.lock": "",
    "rust/cli/Cargo.toml": '[package]\nname = "clonestage"\nversion.workspace = true\n',
    "rust/cli/src/main.rs": "fn main() {}\n",
    "examples/app/WORKSPACE": "",
    "examples/app/BUILD.bazel": 'alias(name = "x", actual = "@clonestage//:spawn")\n',
    "examples/app/MODULE.bazel": "",
    ".bcr/presubmit.yml": PRESUBMIT,
    ".bcr/metadata.template.json": json.dumps({
        "homepage": "https://example.com", "versions": [], "yanked_versions": {},
        "maintainers": [{"name": "FILL IN: name", "github": "FILL-IN-user", "email": "FILL IN"}],
        "repository": ["github:FILL IN/clonestage"]}),
    ".bcr/source.template.json": json.dumps({
        "integrity": "", "strip_prefix": "{REPO}-{VERSION}",
        "url": "https://github.com/{OWNER}/{REPO}/releases/download/{TAG}/{REPO}-{TAG}.tar.gz"}),
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
        self.assert_one_problem(problems, "'//rust:Cargo.lock'", "under 'rust'")

    def test_presubmit_target_in_ignored_package_fails(self):
        presubmit = PRESUBMIT.replace('"@clonestage//:spawn"', '"@clonestage//examples/app:x"')
        problems = self.run_check({".bcr/presubmit.yml": presubmit})
        self.assert_one_problem(problems, ".bcr/presubmit.yml:13", "under 'examples'")

    # ---- 9. dev-only packages ----
    def test_label_into_dev_only_package_fails(self):
        # The alias @clonestage//:clonestage -> //rust:clonestage, with rules_rust a dev dependency.
        build = GOOD["BUILD.bazel"] + 'alias(name = "clonestage", actual = "//rust:clonestage")\n'
        self.assert_one_problem(self.run_check({"BUILD.bazel": build}), "BUILD.bazel:6",
                                "dev-only package 'rust'", "@clonestage_crates")

    def test_presubmit_target_in_dev_only_package_fails(self):
        presubmit = PRESUBMIT.replace('"@clonestage//:spawn"', '"@clonestage//rust:clonestage"')
        self.assert_one_problem(self.run_check({".bcr/presubmit.yml": presubmit}),
                                ".bcr/presubmit.yml:13", "dev-only package 'rust'")

    def test_presubmit_target_not_defined_fails(self):
        presubmit = PRESUBMIT.replace('"@clonestage//:spawn"', '"@clonestage//:clonestage"')
        self.assert_one_problem(self.run_check({".bcr/presubmit.yml": presubmit}),
                                "no target 'clonestage' in package '.'")

    # ---- 10. registry files ----
    def test_presubmit_stray_list_item_fails(self):
        # Issue 22.3: a stray "- 9.x" under bcr_test_module's matrix; PyYAML rejects the file.
        presubmit = PRESUBMIT.replace("    bazel: [8.x]\n", "    bazel: [8.x]\n    - 9.x\n")
        self.assert_one_problem(self.run_check({".bcr/presubmit.yml": presubmit}),
                                "not YAML the registry can read")

    def test_presubmit_task_without_bazel_fails(self):
        presubmit = PRESUBMIT.replace("    bazel: ${{ bazel }}\n    build_targets", "    build_targets")
        self.assert_one_problem(self.run_check({".bcr/presubmit.yml": presubmit}),
                                "task verify names no bazel version")

    def test_presubmit_undefined_matrix_attribute_fails(self):
        presubmit = PRESUBMIT.replace("${{ platform }}\n    bazel: ${{ bazel }}\n    build",
                                      "${{ os }}\n    bazel: ${{ bazel }}\n    build")
        self.assert_one_problem(self.run_check({".bcr/presubmit.yml": presubmit}),
                                "uses ${{ os }}, which matrix does not define")

    def test_presubmit_unknown_platform_fails(self):
        presubmit = PRESUBMIT.replace("    - macos_arm64\n", "    - macos_m1\n")
        self.assert_one_problem(self.run_check({".bcr/presubmit.yml": presubmit}),
                                "platform 'macos_m1' is not one of Bazel CI's")

    def test_presubmit_test_module_without_module_file_fails(self):
        problems = self.run_check(removed=("examples/app/MODULE.bazel",))
        self.assert_one_problem(problems, "module_path 'examples/app' has no MODULE.bazel")

    def test_metadata_schema_fails_on_bad_github_name_and_missing_key(self):
        meta = json.loads(GOOD[".bcr/metadata.template.json"])
        meta["maintainers"][0]["github"] = "FILL IN: user"
        del meta["repository"]
        self.assert_one_problem(self.run_check({".bcr/metadata.template.json": json.dumps(meta)}),
                                "is not a GitHub user name", "lacks 'repository'")

    def test_metadata_not_json_fails(self):
        self.assert_one_problem(self.run_check({".bcr/metadata.template.json": "{,}"}), "not JSON")

    def test_source_template_not_an_archive_fails(self):
        source = json.dumps({"type": "git_repository", "url": "https://x/y.git"})
        self.assert_one_problem(self.run_check({".bcr/source.template.json": source}),
                                "the registry takes archives only", "is not an archive's URL")

    # ---- 11. the binaries table ----
    def test_empty_table_passes_and_filled_table_in_an_archive_passes(self):
        self.assertEqual(self.run_check({"private/binaries_table.bzl": EMPTY_TABLE}), [])
        self.assertEqual(self.run_check({"private/binaries_table.bzl": TABLE}), [])

    def test_filled_table_in_a_checkout_fails(self):
        problems = self.run_check({"private/binaries_table.bzl": TABLE, ".git/HEAD": "ref: x\n"})
        self.assert_one_problem(problems, "filled in a git checkout")

    def test_table_of_another_version_fails(self):
        table = TABLE.replace('"0.1.0"', '"0.2.0"')
        self.assert_one_problem(self.run_check({"private/binaries_table.bzl": table}),
                                "for version 0.2.0, but MODULE.bazel says 0.1.0")

    def test_table_bad_checksum_and_file_name_fail(self):
        table = TABLE.replace(SHA, "abc").replace("v0.1.0-aarch64", "v0.1.0-x86_64")
        self.assert_one_problem(self.run_check({"private/binaries_table.bzl": table}),
                                "is not 64 hex digits", "is not clonestage-<tag>-aarch64-apple-darwin")

    # ---- 12. the Rust a build gets ----
    def test_rules_rust_not_dev_dependency_fails(self):
        module = GOOD["MODULE.bazel"].replace('"0.70.0", dev_dependency = True', '"0.70.0"')
        self.assert_one_problem(self.run_check({"MODULE.bazel": module}),
                                "rules_rust is not a dev_dependency")

    def test_release_rust_other_than_rules_rust_default_fails(self):
        self.assert_one_problem(self.run_check({"tools/release.sh": "RUST=1.93.1\n"}),
                                "RUST=1.93.1", "registers Rust 1.95.0")

    def test_rust_version_newer_than_rules_rust_default_fails(self):
        # Issue 22.2: rules_rust 0.63.0 registers 1.86.0; the lock needs 1.88.
        module = GOOD["MODULE.bazel"].replace('"0.70.0"', '"0.63.0"')
        problems = self.run_check({"MODULE.bazel": module, "tools/release.sh": "RUST=1.86.0\n"})
        self.assert_one_problem(problems, "rust-version 1.88 is newer than the dev rules_rust's default Rust 1.86.0")

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
        # In a package consumers load (rust/ is dev-only: there it would be allowed, check 9).
        build = GOOD["BUILD.bazel"] + 'cc_test(name = "t", deps = ["@googletest//:gtest"])\n'
        self.assert_one_problem(self.run_check({"BUILD.bazel": build}), "@googletest is a dev_dependency")

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
