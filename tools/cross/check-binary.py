#!/usr/bin/env python3
"""Checks that a cross-linked executable runs where its target says.

Contract:

    check-binary.py --target TARGET [--macos-min X.Y] [--glibc-max X.Y] FILE...

TARGET is one of aarch64-macos, x86_64-macos, aarch64-linux, x86_64-linux
(the names of build-spawn.sh). Reads each FILE's headers only, runs nothing,
and checks:

- macOS: a thin 64-bit Mach-O executable (MH_MAGIC_64, MH_EXECUTE) for the
  target's CPU, with an LC_BUILD_VERSION for platform macOS whose minos is
  exactly --macos-min (required), and every dylib it loads under /usr/lib/ or
  /System/ (what every Mac has; anything else would have to be shipped).
- Linux: a 64-bit little-endian ELF executable for the target's machine that
  needs no versioned glibc symbol (GLIBC_x.y in .gnu.version_r) newer than
  --glibc-max (required), and no shared library (DT_NEEDED) but glibc's own
  and libgcc_s (what every glibc system has; anything else would have to be
  shipped). A static executable needs none.

Exit status: 0 when every check holds for every FILE (a one-line summary per
FILE on stdout); 1 when one fails (one line per problem on stderr); 2 on bad
usage or a file that cannot be read or parsed. Nothing in it is specific to
the program checked.
Formats: Apple's <mach-o/loader.h> (cctools, LC_* values and struct
layouts) and the System V gABI / glibc symbol versioning (Elf64_Verneed).
"""

import argparse
import re
import struct
import sys

TARGETS = {
    # name: (format, Mach-O cputype or ELF e_machine)
    "aarch64-macos": ("macho", 0x0100000C),  # CPU_TYPE_ARM64
    "x86_64-macos": ("macho", 0x01000007),  # CPU_TYPE_X86_64
    "aarch64-linux": ("elf", 183),  # EM_AARCH64
    "x86_64-linux": ("elf", 62),  # EM_X86_64
}

MH_MAGIC_64 = 0xFEEDFACF
MH_EXECUTE = 0x2
LC_REQ_DYLD = 0x80000000
LC_LOAD_DYLIB = 0xC
LC_LOAD_WEAK_DYLIB = 0x18 | LC_REQ_DYLD
LC_REEXPORT_DYLIB = 0x1F | LC_REQ_DYLD
LC_LAZY_LOAD_DYLIB = 0x20
LC_LOAD_UPWARD_DYLIB = 0x23 | LC_REQ_DYLD
LC_BUILD_VERSION = 0x32
LC_VERSION_MIN_MACOSX = 0x24
DYLIB_COMMANDS = {LC_LOAD_DYLIB, LC_LOAD_WEAK_DYLIB, LC_REEXPORT_DYLIB, LC_LAZY_LOAD_DYLIB, LC_LOAD_UPWARD_DYLIB}
PLATFORM_MACOS = 1
SYSTEM_DYLIB_PREFIXES = ("/usr/lib/", "/System/")

ET_EXEC = 2
ET_DYN = 3
SHT_DYNAMIC = 6
SHT_GNU_VERNEED = 0x6FFFFFFE
DT_NULL = 0
DT_NEEDED = 1
# glibc's own libraries (its ld.so by arch) and GCC's unwinder, which glibc itself loads.
GLIBC_LIBRARIES = re.compile(
    r"^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libutil\.so\.1"
    r"|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|libgcc_s\.so\.1)$"
)


class Unreadable(Exception):
    """FILE is not what its format says: exit 2."""


def parse_version(text):
    """'12.0' -> (12, 0); raises ValueError."""
    parts = tuple(int(p) for p in text.split("."))
    if not 1 <= len(parts) <= 3 or any(p < 0 for p in parts):
        raise ValueError(text)
    return parts + (0,) * (3 - len(parts))


def show(version):
    major, minor, patch = version
    return f"{major}.{minor}" + (f".{patch}" if patch else "")


def unpack(fmt, data, offset):
    try:
        return struct.unpack_from(fmt, data, offset)
    except struct.error as e:
        raise Unreadable(f"truncated at offset {offset}: {e}") from None


def check_macho(data, cputype, macos_min):
    """Returns (problems, summary) for a Mach-O file."""
    problems = []
    magic, cpu, _sub, filetype, ncmds, _size, _flags, _res = unpack("<IiiIIIII", data, 0)
    if magic != MH_MAGIC_64:
        raise Unreadable(f"not a thin 64-bit little-endian Mach-O (magic {magic:#x})")
    if cpu & 0xFFFFFFFF != cputype:
        problems.append(f"CPU type {cpu & 0xFFFFFFFF:#x}, expected {cputype:#x}")
    if filetype != MH_EXECUTE:
        problems.append(f"file type {filetype}, expected MH_EXECUTE ({MH_EXECUTE})")
    offset = 32
    minos = None
    dylibs = []
    for _ in range(ncmds):
        cmd, cmdsize = unpack("<II", data, offset)
        if cmdsize < 8:
            raise Unreadable(f"load command {cmd:#x} of size {cmdsize}")
        if cmd == LC_BUILD_VERSION:
            platform, packed, _sdk, _ntools = unpack("<IIII", data, offset + 8)
            if platform != PLATFORM_MACOS:
                problems.append(f"LC_BUILD_VERSION platform {platform}, expected macOS ({PLATFORM_MACOS})")
            minos = (packed >> 16, (packed >> 8) & 0xFF, packed & 0xFF)
        elif cmd == LC_VERSION_MIN_MACOSX:
            problems.append("LC_VERSION_MIN_MACOSX instead of LC_BUILD_VERSION")
        elif cmd in DYLIB_COMMANDS:
            (name_offset,) = unpack("<I", data, offset + 8)
            raw = data[offset + name_offset : offset + cmdsize]
            dylibs.append(raw.split(b"\0", 1)[0].decode("utf-8", "replace"))
        offset += cmdsize
    if minos is None:
        problems.append("no LC_BUILD_VERSION load command")
    elif minos != macos_min:
        problems.append(f"LC_BUILD_VERSION minos {show(minos)}, expected {show(macos_min)}")
    for name in dylibs:
        if not name.startswith(SYSTEM_DYLIB_PREFIXES):
            problems.append(f"loads {name}, which is not under /usr/lib/ or /System/")
    summary = f"Mach-O, minos {show(minos) if minos else '?'}, dylibs: {', '.join(dylibs) or 'none'}"
    return problems, summary


def c_string(data, offset):
    end = data.find(b"\0", offset)
    if end < 0:
        raise Unreadable(f"unterminated string at offset {offset}")
    return data[offset:end].decode("ascii", "replace")


def sections_of_type(sections, sh_type):
    """(offset, size, sh_info, its string table's offset) of each section of type SH_TYPE."""
    for _name, t, _flags, _addr, offset, size, link, info, _align, _entsize in sections:
        if t == sh_type:
            yield offset, size, info, sections[link][4]


def needed_libraries(data, sections):
    """The DT_NEEDED names of FILE's SHT_DYNAMIC section (none when static)."""
    needed = []
    for offset, size, _info, strtab in sections_of_type(sections, SHT_DYNAMIC):
        for entry in range(offset, offset + size, 16):  # Elf64_Dyn: d_tag, d_val
            tag, value = unpack("<qQ", data, entry)
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                needed.append(c_string(data, strtab + value))
    return needed


def glibc_versions(data, sections):
    """The GLIBC_x.y versions FILE needs, from its SHT_GNU_verneed section."""
    needed = []
    for offset, _size, info, strtab in sections_of_type(sections, SHT_GNU_VERNEED):
        entry = offset
        for _ in range(info):  # sh_info: the number of Elf64_Verneed entries
            _version, cnt, _file, aux, nxt = unpack("<HHIII", data, entry)
            vernaux = entry + aux
            for _ in range(cnt):
                _hash, _flags2, _other, name, nxt_aux = unpack("<IHHII", data, vernaux)
                needed.append(c_string(data, strtab + name))
                vernaux += nxt_aux
            entry += nxt
    return [n for n in needed if n.startswith("GLIBC_") and n[6:7].isdigit()]


def check_elf(data, machine, glibc_max):
    """Returns (problems, summary) for an ELF file."""
    problems = []
    if data[:4] != b"\x7fELF":
        raise Unreadable("not an ELF file")
    if len(data) < 64:
        raise Unreadable("truncated ELF header")
    if data[4] != 2 or data[5] != 1:
        raise Unreadable("not a 64-bit little-endian ELF file")
    e_type, e_machine = unpack("<HH", data, 16)
    shoff = unpack("<Q", data, 40)[0]
    shentsize, shnum = unpack("<HH", data, 58)
    if e_machine != machine:
        problems.append(f"ELF machine {e_machine}, expected {machine}")
    if e_type not in (ET_EXEC, ET_DYN):
        problems.append(f"ELF type {e_type}, expected an executable")
    sections = [unpack("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    versions = sorted(set(glibc_versions(data, sections)), key=lambda v: parse_version(v[6:]))
    for name in versions:
        if parse_version(name[6:]) > glibc_max:
            problems.append(f"needs {name}, newer than GLIBC_{show(glibc_max)}")
    libraries = needed_libraries(data, sections)
    for name in libraries:
        if not GLIBC_LIBRARIES.match(name):
            problems.append(f"needs {name}, which is not glibc's or libgcc_s")
    newest = versions[-1] if versions else "none (static or no glibc)"
    return problems, f"ELF, newest glibc symbol version {newest}, libraries: {', '.join(libraries) or 'none'}"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, choices=sorted(TARGETS))
    parser.add_argument("--macos-min", help="the exact LC_BUILD_VERSION minos (macOS targets)")
    parser.add_argument("--glibc-max", help="the newest GLIBC_ version allowed (Linux targets)")
    parser.add_argument("files", nargs="+", metavar="FILE")
    args = parser.parse_args(argv)
    kind, machine = TARGETS[args.target]
    option = "--macos-min" if kind == "macho" else "--glibc-max"
    try:
        limit = parse_version((args.macos_min if kind == "macho" else args.glibc_max) or "")
    except ValueError:
        parser.error(f"{args.target} needs {option} X.Y")
    status = 0
    for path in args.files:
        try:
            with open(path, "rb") as f:
                data = f.read()
            check = check_macho if kind == "macho" else check_elf
            problems, summary = check(data, machine, limit)
        except (OSError, Unreadable) as e:
            print(f"check-binary: {path}: {e}", file=sys.stderr)
            status = 2
            continue
        for problem in problems:
            print(f"check-binary: {path}: {problem}", file=sys.stderr)
        if problems:
            status = max(status, 1)
        else:
            print(f"{path}: {args.target} OK: {summary}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
