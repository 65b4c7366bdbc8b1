#!/usr/bin/env python3
"""Tests of rust/third_party/h2_patch.py on small fixture trees (not this checkout).

Contract: `python3 tests/module/h2_patch_test.py` exits 0 when every case passes. It needs
no network and no cargo (a fixture .crate stands in for crates.io's h2; the cargo metadata
step is skipped with --no-cargo). Each case starts from a tree where `generate` ran and
breaks one thing, so `check` is shown to fail when the vendored tree, the patch file and the
Bazel lockfile disagree, and to pass when they agree.
"""

import io
import os
import sys
import tarfile
import tempfile
import unittest
from contextlib import redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "rust", "third_party"))
import h2_patch  # noqa: E402

UPSTREAM = {
    "Cargo.toml": '[package]\nname = "h2"\nversion = "0.4.20"\n',
    "Cargo.lock": "# upstream's own lockfile, not kept\n",
    ".github/workflows/ci.yml": "on: push\n",
    "src/lib.rs": "pub mod server;\n",
    "src/server.rs": "fn authority() -> Result<(), ()> {\n    Err(())\n}\n",
}
VENDORED = dict(UPSTREAM)
del VENDORED["Cargo.lock"], VENDORED[".github/workflows/ci.yml"]
VENDORED.update({
    "src/server.rs": "fn authority() -> Result<(), ()> {\n    Ok(())\n}\n",
    "src/lib.rs": "pub mod server;\npub const CLONESTAGE_PATCHED_ANY_AUTHORITY: () = ();\n",
    "PATCH.md": "Removed: `.cargo-ok`, `.github/`, `Cargo.lock`. Added: `PATCH.md`.\n",
})
CARGO_LOCK = ('version = 4\n\n[[package]]\nname = "bytes"\nversion = "1.0.0"\n'
              'source = "registry+https://github.com/rust-lang/crates.io-index"\nchecksum = "aa"\n\n'
              '[[package]]\nname = "h2"\nversion = "0.4.20"\ndependencies = [\n "bytes",\n]\n')


class H2PatchTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = os.path.join(self.tmp.name, "checkout")
        for rel, text in VENDORED.items():
            self.write(os.path.join(h2_patch.VENDORED, rel), text)
        self.write(h2_patch.CARGO_LOCK, CARGO_LOCK)
        self.crate = os.path.join(self.tmp.name, "h2-0.4.20.crate")
        with tarfile.open(self.crate, "w:gz") as tar:
            for rel, text in UPSTREAM.items():
                data = text.encode()
                info = tarfile.TarInfo(f"h2-0.4.20/{rel}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        self.assertEqual(self.run_tool("generate"), 0)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, rel, text):
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)

    def read(self, rel):
        with open(os.path.join(self.root, rel), encoding="utf-8") as f:
            return f.read()

    def run_tool(self, *args):
        out = io.StringIO()
        with redirect_stdout(out):
            rc = h2_patch.main(["h2_patch.py", *args, "--root", self.root, "--crate", self.crate,
                                *(["--no-cargo"] if args[0] == "check" else [])])
        self.output = out.getvalue()
        return rc

    def assert_check_fails(self, *words):
        self.assertEqual(self.run_tool("check"), 1, self.output)
        for word in words:
            self.assertIn(word, self.output)

    def test_generated_files_pass(self):
        self.assertEqual(self.run_tool("check"), 0, self.output)
        patch = self.read(h2_patch.PATCH)
        # Git-style headers: Bazel's own patch reads a bare "--- a/next" after a hunk as a
        # removed line (tests/module/h2_bazel_patch_test.sh failed on that).
        self.assertIn("diff --git a/src/server.rs b/src/server.rs\n--- a/src/server.rs\n+++ b/src/server.rs\n", patch)
        self.assertIn("+pub const CLONESTAGE_PATCHED_ANY_AUTHORITY", patch)
        for left_out in ("PATCH.md", ".github", "Cargo.lock"):
            self.assertNotIn(left_out, patch)
        lock = self.read(h2_patch.BAZEL_LOCK)
        sha = h2_patch.sha256(self.crate)
        self.assertIn('name = "h2"\nversion = "0.4.20"\nsource = "registry+https://github.com/'
                      f'rust-lang/crates.io-index"\nchecksum = "{sha}"\ndependencies', lock)
        self.assertEqual(lock.replace(f'source = "{h2_patch.CRATES_IO}"\nchecksum = "{sha}"\n', "", 1),
                         CARGO_LOCK)

    def test_vendored_tree_changed_without_regenerating_fails(self):
        self.write(os.path.join(h2_patch.VENDORED, "src/server.rs"), "fn authority() {}\n")
        self.assert_check_fails("h2-authority.patch: stale",
                                "h2-authority.patch applied to crates.io's h2 0.4.20 differs from "
                                "rust/third_party/h2 in: src/server.rs")

    def test_new_vendored_file_without_regenerating_fails(self):
        self.write(os.path.join(h2_patch.VENDORED, "src/extra.rs"), "\n")
        self.assert_check_fails("differs from rust/third_party/h2 in: src/extra.rs")

    def test_new_vendored_file_is_carried_by_the_patch(self):
        self.write(os.path.join(h2_patch.VENDORED, "src/extra.rs"), "// added\n")
        self.assertEqual(self.run_tool("generate"), 0)
        self.assertIn("diff --git a/src/extra.rs b/src/extra.rs\nnew file mode 100644\n--- /dev/null\n",
                      self.read(h2_patch.PATCH))
        self.assertEqual(self.run_tool("check"), 0, self.output)

    def test_hand_edited_patch_fails(self):
        patch = self.read(h2_patch.PATCH).replace("+    Ok(())", "+    Ok(( ))")
        self.write(h2_patch.PATCH, patch)
        self.assert_check_fails("h2-authority.patch: stale", "differs from rust/third_party/h2 in: src/server.rs")

    def test_patch_that_does_not_apply_fails(self):
        self.write(h2_patch.PATCH, self.read(h2_patch.PATCH).replace(" pub mod server;", " pub mod client;"))
        self.assert_check_fails("does not apply to crates.io's h2 0.4.20")

    def test_stale_bazel_lockfile_fails(self):
        self.write(h2_patch.CARGO_LOCK, CARGO_LOCK.replace('version = "1.0.0"', 'version = "1.0.1"'))
        self.assert_check_fails("rust/Cargo.bazel.lock: stale")

    def test_missing_bazel_lockfile_fails(self):
        os.remove(os.path.join(self.root, h2_patch.BAZEL_LOCK))
        self.assert_check_fails("rust/Cargo.bazel.lock: missing")

    def test_cargo_lock_without_patched_h2_fails(self):
        # What a cargo run outside the checkout leaves: h2 re-resolved from crates.io.
        self.write(h2_patch.CARGO_LOCK, self.read(h2_patch.BAZEL_LOCK))
        self.assert_check_fails("expected one h2 without a source")

    def test_patch_md_must_name_what_is_left_out(self):
        self.write(os.path.join(h2_patch.VENDORED, "PATCH.md"), "nothing listed\n")
        self.assert_check_fails("PATCH.md does not name `.github`", "does not name `PATCH.md`")


if __name__ == "__main__":
    unittest.main()
