#!/usr/bin/env python3
"""Tests of check-binary.py on small synthetic Mach-O and ELF headers.

Each case builds the few bytes the checker reads (a header and the load
commands or sections that matter), writes them to a temporary file and runs
the checker's main(). Run: `python3 tools/cross/check_binary_test.py`.
"""

import contextlib
import importlib.util
import io
import os
import struct
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("check_binary", os.path.join(HERE, "check-binary.py"))
check_binary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_binary)

ARM64 = 0x0100000C
X86_64 = 0x01000007


def macho(cputype=ARM64, filetype=2, minos=(12, 0, 0), dylibs=("/usr/lib/libSystem.B.dylib",), build_version=True):
    commands = []
    if build_version:
        major, minor, patch = minos
        commands.append(struct.pack("<IIIIII", 0x32, 24, 1, (major << 16) | (minor << 8) | patch, 0, 0))
    for name in dylibs:
        raw = name.encode() + b"\0"
        raw += b"\0" * (-(24 + len(raw)) % 8)
        commands.append(struct.pack("<IIIIII", 0xC, 24 + len(raw), 24, 0, 0, 0) + raw)
    body = b"".join(commands)
    header = struct.pack("<IiiIIIII", 0xFEEDFACF, cputype, 0, filetype, len(commands), len(body), 0, 0)
    return header + body


def elf(machine=62, glibc=("GLIBC_2.2.5", "GLIBC_2.14"), needed=("libc.so.6",)):
    """An ELF header, a string table, a .gnu.version_r naming libc.so.6's versions, a .dynamic
    naming the needed libraries, and the three section headers."""
    strings = [b"", b"libc.so.6"] + [v.encode() for v in glibc] + [n.encode() for n in needed]
    strtab = b"\0".join(strings) + b"\0"
    names = {}
    offset = 0
    for raw in strings:
        names.setdefault(raw.decode(), offset)
        offset += len(raw) + 1
    strtab_off = 64
    verneed_off = strtab_off + len(strtab)
    verneed = struct.pack("<HHIII", 1, len(glibc), names["libc.so.6"], 16, 0)
    for i, v in enumerate(glibc):
        nxt = 16 if i + 1 < len(glibc) else 0
        verneed += struct.pack("<IHHII", 0, 0, i + 2, names[v], nxt)
    dynamic_off = verneed_off + len(verneed)
    dynamic = b"".join(struct.pack("<qQ", 1, names[n]) for n in needed) + struct.pack("<qQ", 0, 0)
    shoff = dynamic_off + len(dynamic)
    sections = struct.pack("<IIQQQQIIQQ", 0, 3, 0, 0, strtab_off, len(strtab), 0, 0, 1, 0)
    sections += struct.pack("<IIQQQQIIQQ", 0, 0x6FFFFFFE, 0, 0, verneed_off, len(verneed), 0, 1, 8, 0)
    sections += struct.pack("<IIQQQQIIQQ", 0, 6, 0, 0, dynamic_off, len(dynamic), 0, 0, 8, 16)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 9
    header = ident + struct.pack("<HHIQQQIHHHHHH", 3, machine, 1, 0, 0, shoff, 0, 64, 0, 0, 64, 3, 0)
    return header + strtab + verneed + dynamic + sections


class CheckBinaryTest(unittest.TestCase):
    def write(self, data):
        with tempfile.NamedTemporaryFile(delete=False) as f:
            f.write(data)
        self.addCleanup(os.unlink, f.name)
        return f.name

    def run_checker(self, data, *args):
        """Runs the checker on DATA written to a file (after ARGS), or on ARGS alone when None."""
        files = [] if data is None else [self.write(data)]
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            try:
                code = check_binary.main([*args, *files])
            except SystemExit as e:  # argparse
                code = e.code
        return code, err.getvalue()

    def test_macos_executable_for_the_stated_minimum_passes(self):
        self.assertEqual(self.run_checker(macho(), "--target", "aarch64-macos", "--macos-min", "12.0")[0], 0)

    def test_macos_other_minimum_fails(self):
        # zig's own default, when the deployment target is not given.
        code, err = self.run_checker(macho(minos=(15, 0, 0)), "--target", "aarch64-macos", "--macos-min", "12.0")
        self.assertEqual(code, 1)
        self.assertIn("minos 15.0, expected 12.0", err)

    def test_macos_wrong_cpu_fails(self):
        code, err = self.run_checker(macho(cputype=X86_64), "--target", "aarch64-macos", "--macos-min", "12.0")
        self.assertEqual(code, 1)
        self.assertIn("CPU type", err)

    def test_macos_dylib_outside_the_system_fails(self):
        data = macho(dylibs=("/usr/lib/libSystem.B.dylib", "/opt/homebrew/lib/libc++.1.dylib"))
        code, err = self.run_checker(data, "--target", "aarch64-macos", "--macos-min", "12.0")
        self.assertEqual(code, 1)
        self.assertIn("/opt/homebrew/lib/libc++.1.dylib", err)

    def test_macos_without_build_version_fails(self):
        code, err = self.run_checker(macho(build_version=False), "--target", "x86_64-macos", "--macos-min", "12.0")
        self.assertEqual(code, 1)
        self.assertIn("no LC_BUILD_VERSION", err)

    def test_macos_needs_the_minimum(self):
        self.assertEqual(self.run_checker(macho(), "--target", "aarch64-macos")[0], 2)

    def test_elf_within_the_glibc_limit_passes(self):
        self.assertEqual(self.run_checker(elf(), "--target", "x86_64-linux", "--glibc-max", "2.17")[0], 0)

    def test_elf_newer_glibc_symbol_fails(self):
        code, err = self.run_checker(
            elf(glibc=("GLIBC_2.2.5", "GLIBC_2.34")), "--target", "x86_64-linux", "--glibc-max", "2.17"
        )
        self.assertEqual(code, 1)
        self.assertIn("needs GLIBC_2.34", err)

    def test_elf_wrong_machine_fails(self):
        code, err = self.run_checker(elf(machine=62), "--target", "aarch64-linux", "--glibc-max", "2.17")
        self.assertEqual(code, 1)
        self.assertIn("ELF machine 62", err)

    def test_elf_needing_glibc_and_libgcc_s_passes(self):
        needed = ("libgcc_s.so.1", "libpthread.so.0", "libc.so.6", "ld-linux-aarch64.so.1")
        code, err = self.run_checker(elf(machine=183, needed=needed), "--target", "aarch64-linux", "--glibc-max", "2.17")
        self.assertEqual((code, err), (0, ""))

    def test_elf_needing_a_library_outside_glibc_fails(self):
        # What a link against the build machine's OpenSSL or libstdc++ would leave.
        data = elf(needed=("libssl.so.3", "libc.so.6", "libstdc++.so.6"))
        code, err = self.run_checker(data, "--target", "x86_64-linux", "--glibc-max", "2.17")
        self.assertEqual(code, 1)
        self.assertIn("needs libssl.so.3, which is not glibc's", err)
        self.assertIn("needs libstdc++.so.6", err)
        self.assertNotIn("libc.so.6", err)

    def test_every_file_is_checked_and_the_bad_one_named(self):
        good, bad = self.write(macho()), self.write(macho(minos=(13, 0, 0)))
        code, err = self.run_checker(None, "--target", "aarch64-macos", "--macos-min", "12.0", good, bad)
        self.assertEqual(code, 1)
        self.assertEqual(err.strip(), f"check-binary: {bad}: LC_BUILD_VERSION minos 13.0, expected 12.0")
        unreadable = self.write(b"\x7fEL")
        code, err = self.run_checker(None, "--target", "aarch64-macos", "--macos-min", "12.0", good, unreadable, bad)
        self.assertEqual(code, 2)
        self.assertIn(bad, err)

    def test_wrong_format_is_unreadable(self):
        self.assertEqual(self.run_checker(elf(), "--target", "x86_64-macos", "--macos-min", "12.0")[0], 2)
        self.assertEqual(self.run_checker(macho(), "--target", "x86_64-linux", "--glibc-max", "2.17")[0], 2)
        self.assertEqual(self.run_checker(b"\x7fEL", "--target", "x86_64-linux", "--glibc-max", "2.17")[0], 2)


if __name__ == "__main__":
    unittest.main()
