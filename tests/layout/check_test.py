#!/usr/bin/env python3
"""Tests of tests/layout/check.py on small made-up workspaces: each rule fires
on a tree that breaks it (so the check can fail) and stays quiet on one that
keeps it. Run: `python3 tests/layout/check_test.py` (one step of tests/run.sh)."""

import os
import subprocess
import sys
import tempfile
import unittest

CHECK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check.py")


def workspace(root, crates):
    """crates: {dir: (package name, {src-relative path: text})}"""
    with open(os.path.join(root, "Cargo.toml"), "w") as fh:
        fh.write("[workspace]\nmembers = [%s]\n" % ", ".join(f'"{d}"' for d in crates))
    for d, (name, files) in crates.items():
        os.makedirs(os.path.join(root, d, "src"), exist_ok=True)
        with open(os.path.join(root, d, "Cargo.toml"), "w") as fh:
            fh.write(f'[package]\nname = "{name}"\nversion = "0.1.0"\n')
        for rel, text in files.items():
            path = os.path.join(root, d, "src", rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as fh:
                fh.write(text)


def run(crates):
    with tempfile.TemporaryDirectory() as root:
        workspace(root, crates)
        p = subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)
        return p.returncode, p.stdout


DOC = "//! what this owns\n"


class LayoutCheck(unittest.TestCase):
    def test_clean_tree_passes(self):
        code, out = run({"a": ("clonestage-server", {
            "lib.rs": DOC + "mod state;\nmod execution;\n",
            "state.rs": DOC + "pub struct State;\n",
            "execution/mod.rs": DOC + "mod run;\nuse crate::state::State;\nuse run::go;\n",
            "execution/run.rs": DOC + "use super::super::state::State;\n",
            "platform/linux.rs": DOC, "platform/macos.rs": DOC, "platform/mod.rs": DOC,
        })})
        self.assertEqual(code, 0, out)

    def test_file_cycle_fails(self):
        code, out = run({"a": ("x", {
            "lib.rs": DOC, "digest.rs": DOC + "use crate::error::Error;\n",
            "error.rs": DOC + "fn f(d: crate::digest::Digest) {}\n",
        })})
        self.assertEqual(code, 1)
        self.assertIn("import cycle among 2 modules: src/digest.rs -> src/error.rs", out)

    def test_top_level_cycle_fails_in_the_server_and_the_engine_only(self):
        files = {
            "lib.rs": DOC,
            "state.rs": DOC + "use crate::bytestream::uploads::Uploads;\n",
            "bytestream/mod.rs": DOC + "mod uploads;\nuse crate::state::State;\n",
            "bytestream/uploads.rs": DOC + "pub struct Uploads;\n",
        }
        for crate in ("clonestage-server", "clonestage-engine"):
            code, out = run({"a": (crate, files)})
            self.assertEqual(code, 1)
            self.assertIn("top-level modules bytestream, state", out)
        code, out = run({"a": ("x", files)})
        self.assertEqual(code, 0, out)

    ENGINE = {
        "lib.rs": DOC + "pub use stage::Stager;\n",
        "digest.rs": DOC, "error.rs": DOC + "use crate::digest::Digest;\n",
        "cas/mod.rs": DOC + "mod pins;\nuse crate::error::Error;\n",
        "cas/pins.rs": DOC + "use super::Cache;\n",
        "tree/mod.rs": DOC + "use crate::cas::Cache;\n",
        "stage/mod.rs": DOC + "mod pool;\nuse crate::tree::walk;\n",
        "stage/pool.rs": DOC + "use super::super::cas::Cache;\n",
        "gc/mod.rs": DOC + "use crate::{cas, tree};\nuse crate::stage::pool::Pool;\n",
    }

    def test_engine_layers_pass_when_every_import_runs_down(self):
        code, out = run({"a": ("clonestage-engine", self.ENGINE)})
        self.assertEqual(code, 0, out)

    def test_engine_import_from_a_higher_layer_fails(self):
        for rel, back, want in [
            ("cas/pins.rs", "use crate::tree::walk;\n", "src/cas/pins.rs imports tree, from a higher layer"),
            ("cas/pins.rs", "use crate::{digest, tree::{self, walk}};\n", "src/cas/pins.rs imports tree, from a higher layer"),
            # Through the crate root's re-export, and two levels up by `super::super`.
            ("cas/pins.rs", "fn f(_: crate::Stager) {}\n", "src/cas/pins.rs imports stage, from a higher layer"),
            ("stage/pool.rs", "use super::super::gc::collect;\n", "src/stage/pool.rs imports gc, from a higher layer"),
            ("digest.rs", "use crate::error::Error;\n", "src/digest.rs imports error, from a higher layer"),
        ]:
            files = dict(self.ENGINE)
            files[rel] += back
            code, out = run({"a": ("clonestage-engine", files)})
            self.assertEqual(code, 1, rel + back)
            self.assertIn(want, out)

    def test_engine_import_within_a_layer_and_unplaced_modules_fail(self):
        files = dict(self.ENGINE)
        files["digest.rs"] += "use crate::platform::Dir;\n"
        files["platform/mod.rs"] = DOC
        files["helpers.rs"] = DOC
        code, out = run({"a": ("clonestage-engine", files)})
        self.assertEqual(code, 1)
        self.assertIn("src/digest.rs imports platform, from its own layer", out)
        self.assertIn("top-level module helpers is in no layer", out)

    def test_cfg_test_blocks_and_comments_are_not_imports(self):
        code, out = run({"a": ("x", {
            "lib.rs": DOC, "a.rs": DOC + "pub fn f() {}\n#[cfg(test)]\nmod tests {\n    use crate::b::g;\n}\n",
            "b.rs": DOC + "// see crate::a::f\nuse crate::a::f;\n",
        })})
        self.assertEqual(code, 0, out)

    def test_long_file_needs_a_reason(self):
        long = DOC + "fn f() {}\n" * 420
        code, out = run({"a": ("x", {"lib.rs": DOC, "big.rs": long})})
        self.assertEqual(code, 1)
        self.assertIn("src/big.rs: 421 lines", out)
        code, out = run({"a": ("x", {"lib.rs": DOC, "big.rs": "//! Long because: one table.\n" + long,
                                      "tests.rs": long})})
        self.assertEqual(code, 0, out)

    def test_repeated_names_and_missing_docs_fail(self):
        code, out = run({"a": ("x", {
            "lib.rs": DOC, "stage/outputs.rs": DOC, "execution/outputs.rs": DOC, "nodoc.rs": "fn f() {}\n",
        })})
        self.assertEqual(code, 1)
        self.assertIn("2 files named outputs.rs", out)
        self.assertIn("src/nodoc.rs: no //! doc", out)

    def test_more_than_one_run_fails(self):
        code, out = run({"a": ("x", {
            "lib.rs": DOC + "pub fn run() {}\n", "exec.rs": DOC + "pub(crate) fn run(x: u8) {}\n",
            "work.rs": DOC + "struct J;\nimpl J {\n    fn run_queue(&self) {}\n}\n",
        })})
        self.assertEqual(code, 1)
        self.assertIn("2 files define a function named run: src/exec.rs, src/lib.rs", out)

    def test_server_reach_ins_fail(self):
        code, out = run({"a": ("clonestage-server", {
            "lib.rs": DOC,
            "state.rs": DOC + "use crate::execution::prespawn::Pool;\n",
            "execution/mod.rs": DOC + "mod prespawn;\nuse crate::client::running;\nuse crate::capabilities::MAX;\n",
            "execution/prespawn.rs": DOC,
            "cas_service.rs": DOC + "use crate::bytestream::zstd;\n",
            "bytestream/mod.rs": DOC + "pub mod zstd;\n", "bytestream/zstd.rs": DOC,
            "client/mod.rs": DOC + "mod running;\npub use running::running;\n",
            "client/running.rs": DOC + "use crate::layout::Layout;\nuse crate::state::State;\n",
            "layout.rs": DOC, "capabilities.rs": DOC,
        })})
        self.assertEqual(code, 1)
        self.assertIn("src/state.rs reaches into execution::prespawn", out)
        self.assertIn("src/execution/mod.rs reaches into client", out)
        self.assertIn("src/client/running.rs reaches into state", out)
        self.assertNotIn("reaches into layout", out)
        self.assertNotIn("src/client/mod.rs", out)
        self.assertIn("src/cas_service.rs reaches into bytestream::zstd", out)
        self.assertNotIn("capabilities", out)

    def test_names_repeated_across_crates_fail_but_cli_commands(self):
        code, out = run({
            "engine": ("clonestage-engine", {"lib.rs": DOC, "platform/lock.rs": DOC, "stats.rs": DOC}),
            "server": ("clonestage-server", {"lib.rs": DOC, "lock.rs": DOC}),
            "cli": ("clonestage", {"main.rs": DOC, "commands/stats.rs": DOC}),
        })
        self.assertEqual(code, 1)
        self.assertIn("2 files named lock.rs in different crates", out)
        self.assertNotIn("stats.rs", out)


if __name__ == "__main__":
    unittest.main()
