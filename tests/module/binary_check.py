#!/usr/bin/env python3
"""Checks a release binary against the platform its archive names.

Contract: `python3 tests/module/binary_check.py TRIPLE FILE...` exits 0 when every FILE is an
executable for TRIPLE as tools/release.sh promises, 1 with one line per problem (2 on bad
usage). Offline; reads the files (and runs readelf for ELF symbol versions).

- *-apple-darwin: a 64-bit Mach-O executable (MH_EXECUTE) for the arch (CPU_TYPE_X86_64,
  CPU_TYPE_ARM64), an LC_BUILD_VERSION for macOS (platform 1) whose minos is MACOS_MIN, and
  every LC_LOAD_DYLIB under /usr/lib/ or /System/Library/ (the system's libraries only).
  Load command numbers from Apple's <mach-o/loader.h>.
- *-linux-gnu: a 64-bit ELF executable for the machine (EM_X86_64 62, EM_AARCH64 183), no
  GLIBC_x.y symbol version above GLIBC_MIN, and no NEEDED library beyond glibc's own and
  libgcc_s (which every glibc system has).

Stand-in until the cross tools' own checker (tools/cross, issue 22) lands; then release tests
should call that instead.
"""

import re
import struct
import subprocess
import sys

MACOS_MIN = (12, 0)
GLIBC_MIN = (2, 17)
MH_MAGIC_64 = 0xFEEDFACF
MH_EXECUTE = 2
CPU = {"x86_64": 0x01000007, "aarch64": 0x0100000C}
LC_REQ_DYLD = 0x80000000
DYLIB_CMDS = {0xC, 0x18 | LC_REQ_DYLD, 0x1F | LC_REQ_DYLD, 0x23 | LC_REQ_DYLD}  # load, weak, reexport, upward
LC_BUILD_VERSION = 0x32
PLATFORM_MACOS = 1
ELF_MACHINE = {"x86_64": 62, "aarch64": 183}
GLIBC_LIBS = re.compile(r"^(libc|libm|libdl|libpthread|librt|libutil|libgcc_s|ld-linux[-.\w]*)\.so(\.\d+)*$")


def check_macho(arch, path, data, out):
    if len(data) < 32 or struct.unpack_from("<I", data)[0] != MH_MAGIC_64:
        out.append(f"{path}: not a 64-bit Mach-O file")
        return
    _, cputype, _, filetype, ncmds, _, _, _ = struct.unpack_from("<IiiIIIII", data)
    if cputype != CPU[arch]:
        out.append(f"{path}: cputype {cputype:#x}, want {arch} ({CPU[arch]:#x})")
    if filetype != MH_EXECUTE:
        out.append(f"{path}: filetype {filetype}, want MH_EXECUTE")
    off, minos = 32, None
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, off)
        if cmd == LC_BUILD_VERSION:
            platform, version = struct.unpack_from("<II", data, off + 8)
            if platform != PLATFORM_MACOS:
                out.append(f"{path}: LC_BUILD_VERSION platform {platform}, want macOS (1)")
            minos = (version >> 16, (version >> 8) & 0xFF)
        elif cmd in DYLIB_CMDS:
            name_off = struct.unpack_from("<I", data, off + 8)[0]
            name = data[off + name_off: off + size].split(b"\0")[0].decode()
            if not name.startswith(("/usr/lib/", "/System/Library/")):
                out.append(f"{path}: links {name}, not a macOS system library")
        off += size
    if minos is None:
        out.append(f"{path}: no LC_BUILD_VERSION (minimum macOS unstated)")
    elif minos != MACOS_MIN:
        out.append(f"{path}: LC_BUILD_VERSION minos {minos[0]}.{minos[1]}, want {MACOS_MIN[0]}.{MACOS_MIN[1]}")


def check_elf(arch, path, data, out):
    if data[:4] != b"\x7fELF" or data[4] != 2:
        out.append(f"{path}: not a 64-bit ELF file")
        return
    e_type, e_machine = struct.unpack_from("<HH", data, 16)
    if e_machine != ELF_MACHINE[arch]:
        out.append(f"{path}: e_machine {e_machine}, want {arch} ({ELF_MACHINE[arch]})")
    if e_type not in (2, 3):  # ET_EXEC, ET_DYN (a PIE)
        out.append(f"{path}: e_type {e_type}, not an executable")
    info = subprocess.run(["readelf", "-V", "-d", "--wide", path], capture_output=True, text=True)
    if info.returncode != 0:
        out.append(f"{path}: readelf failed: {info.stderr.strip()}")
        return
    for major, minor in {tuple(map(int, v)) for v in re.findall(r"GLIBC_(\d+)\.(\d+)", info.stdout)}:
        if (major, minor) > GLIBC_MIN:
            out.append(f"{path}: needs GLIBC_{major}.{minor}, above the floor {GLIBC_MIN[0]}.{GLIBC_MIN[1]}")
    for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", info.stdout):
        if not GLIBC_LIBS.match(lib):
            out.append(f"{path}: needs {lib}, not part of glibc")


def main(argv):
    if len(argv) < 3 or argv[1].split("-")[0] not in CPU:
        print("usage: binary_check.py TRIPLE FILE...", file=sys.stderr)
        return 2
    triple, arch = argv[1], argv[1].split("-")[0]
    out = []
    for path in argv[2:]:
        with open(path, "rb") as f:
            data = f.read()
        if triple.endswith("-apple-darwin"):
            check_macho(arch, path, data, out)
        elif triple.endswith("-linux-gnu"):
            check_elf(arch, path, data, out)
        else:
            out.append(f"{triple}: not a platform of the release")
    for line in out:
        print(f"FAIL {line}")
    return 1 if out else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
