#!/usr/bin/env python3
"""Static check of the Rust code's layout: the rules a reader relies on.

Contract: `python3 tests/layout/check.py [RUST_DIR]` (RUST_DIR defaults to
this checkout's rust/) reads the crates listed in RUST_DIR/Cargo.toml's
workspace members, runs no compiler, and exits 0 when every rule holds, 1
with one line per problem otherwise (2 on bad usage). Well under a second;
one step of tests/run.sh.

Rules (issue 13, "one redesign step for the next reader"):

1. no import cycle between the modules of one crate. A file imports the
   module of each `crate::a::b` path it names (`use`, or a path in code) and
   of each `super::x`; a cycle among files is reported with the names that
   tie it. Imports of a file's own submodules (its children) are not edges:
   a parent declaring and re-exporting its children is the module tree, not a
   loop. The same holds one level up, between a crate's top-level modules
   (`state` -> `execution` -> `state` is a loop even when it runs through
   different files of `execution/`) in the crates of TOP_LEVEL_ACYCLIC (the
   server, as issue 13 asks, and the engine, issue 27). `super::super::x`
   climbs two levels, `crate::{a, b::c}` names both, and `crate::Name`
   re-exported by the crate root (`pub use m::Name`) is an import of `m`.
2. no non-test source file over 400 lines unless its `//!` header says why,
   with a line starting `//! Long because` (tests, `tests.rs`, `tests_*.rs`,
   `tests/` and benches are exempt).
3. no two files of the same name where a reader would confuse them, in one
   crate or across the workspace's crates: names other than the conventional
   ones (mod.rs, lib.rs, main.rs, tests.rs, and the per-platform linux.rs /
   macos.rs behind one interface). The CLI's `commands/` files are named
   after the subcommand they implement and are left out across crates.
4. every source file starts with a `//!` doc saying what it owns.
5. at most one non-test file of a crate defines a function named plain
   `run` (the crate's entry point, if any): three `run()`s in one request's
   path were a reader's guess which one is meant.
6. in the server, the shared state imports no service, no service imports
   another (the advertised limits of `capabilities` excepted), the serving
   code does not import `client` (the CLI's side: address, status, stop), and
   `client` imports no service, nor the shared state or the server's start:
   it reads the files the server writes, beside it, never inside it.
7. in the engine, every top-level module sits in one layer of ENGINE_LAYERS
   and imports only from the layers below its own (issue 27): the cache at
   the bottom knows nothing of trees, stages or the pool; what needs them all
   (gc's reachability and eviction order) is the top layer. A top-level
   module the list does not place is a problem too, so a new one is placed
   on purpose.
"""

import os
import re
import sys
import tomllib

MAX_LINES = 400
CONVENTIONAL = {"mod.rs", "lib.rs", "main.rs", "tests.rs", "linux.rs", "macos.rs", "build.rs"}
TOP_LEVEL_ACYCLIC = {"clonestage-server", "clonestage-engine"}
# The engine's layers, bottom first (rule 7); docs/design/engine.md draws them.
ENGINE_LAYERS = [
    {"digest", "platform"},
    {"error"},
    {"macho", "remove", "stats"},
    {"cas"},
    {"tree"},
    {"ledger", "shared"},
    {"stage"},
    {"gc"},
]
SERVER_SERVICES = {"capabilities", "cas_service", "bytestream", "action_cache_service", "execution"}
SERVER_CLIENT_SIDE = "client"
# What the client side must not reach: the serving state and the server's start.
SERVER_SERVING_CORE = SERVER_SERVICES | {"state", "server"}
PATH_RE = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def is_test_file(rel):
    base = os.path.basename(rel)
    parts = rel.split(os.sep)
    return base == "tests.rs" or base.startswith("tests_") or "tests" in parts[:-1] or "benches" in parts


def crate_sources(crate_dir):
    src = os.path.join(crate_dir, "src")
    out = []
    for dirpath, _, files in os.walk(src):
        for f in files:
            if f.endswith(".rs"):
                out.append(os.path.relpath(os.path.join(dirpath, f), src))
    return sorted(out)


def module_of(rel):
    """src-relative file -> module path tuple (lib.rs/main.rs -> ())."""
    parts = rel[:-3].split(os.sep)
    if parts[-1] in ("lib", "main") and len(parts) == 1:
        return ()
    if parts[-1] == "mod":
        parts = parts[:-1]
    return tuple(parts)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return "\n".join(line.split("//", 1)[0] for line in text.splitlines())


def cfg_test_blocks_removed(text):
    """Drop `#[cfg(test)] mod ... { ... }` bodies: test code may reach anywhere."""
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def root_reexports(text):
    """Names the crate root re-exports (`pub use m::{A, b::C}`) -> module `m`."""
    out = {}
    for m in re.finditer(r"\bpub\s+use\s+([a-z_][a-z0-9_]*)::([^;]*);", text):
        for name in re.findall(r"\b(?:as\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*(?=[,}]|$)", m.group(2)):
            out[name] = m.group(1)
    return out


GROUP_RE = re.compile(r"\b((?:crate|super)(?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{")


def expand_groups(text):
    """`crate::{a, b::{C, d}}` -> `crate::a, crate::b::C, crate::b::d`, so each is a path."""
    while m := GROUP_RE.search(text):
        depth, j, items, start = 1, m.end(), [], m.end()
        while j < len(text) and depth:
            c = text[j]
            if c in "{}":
                depth += 1 if c == "{" else -1
            if (c == "," and depth == 1) or depth == 0:
                items.append(text[start:j].strip())
                start = j + 1
            j += 1
        paths = ", ".join(f"{m.group(1)}::{i}" for i in items if i and i != "self")
        if "self" in items:
            paths = ", ".join(p for p in (m.group(1), paths) if p)
        text = text[:m.start()] + paths + text[j:]
    return text


def imports(mod, text, modules, reexports=None):
    """Modules (files) this file names, resolved to the longest existing prefix."""
    found = set()
    for m in PATH_RE.finditer(expand_groups(text)):
        segs = [s for s in m.group(2).split("::") if s]
        if m.group(1) == "crate":
            base = []
            if segs and segs[0] in (reexports or {}):
                segs = [reexports[segs[0]]] + segs[1:]
        else:
            # `super` in a mod.rs/lib.rs file is its parent module; in a leaf file
            # the parent too (the leaf is the module itself). Each further `super`
            # climbs one more level.
            base = list(mod[:-1])
            while segs and segs[0] == "super":
                base, segs = base[:-1], segs[1:]
        path = tuple(base + segs)
        for k in range(len(path), -1, -1):
            if path[:k] in modules:
                target = path[:k]
                break
        else:
            continue
        # Own descendants are the module tree, not an import loop; own ancestors'
        # re-exports are resolved to the ancestor file (a real edge).
        if target != mod and target[: len(mod)] != mod:
            found.add(target)
    return found


def find_cycles(edges):
    """Strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check_crate(crate_dir, name, names_seen):
    problems = []
    files = crate_sources(crate_dir)
    modfile = {module_of(f): f for f in files}
    modules = set(modfile)
    edges = {}
    by_name = {}
    runs = []
    root = next((f for f in ("lib.rs", "main.rs") if f in files), None)
    reexports = {}
    if root:
        with open(os.path.join(crate_dir, "src", root), encoding="utf-8") as fh:
            reexports = root_reexports(strip_comments(fh.read()))
    for rel in files:
        path = os.path.join(crate_dir, "src", rel)
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        lines = text.splitlines()
        shown = f"{name}: src/{rel}"
        if not lines or not lines[0].startswith("//!"):
            problems.append(f"{shown}: no //! doc at the top saying what the file owns")
        if not is_test_file(rel):
            if len(lines) > MAX_LINES and not any(l.startswith("//! Long because") for l in lines[:40]):
                problems.append(
                    f"{shown}: {len(lines)} lines (> {MAX_LINES}) and no '//! Long because' reason at its top"
                )
            base = os.path.basename(rel)
            if base not in CONVENTIONAL:
                by_name.setdefault(base, []).append(rel)
                if not (name == "clonestage" and rel.startswith("commands" + os.sep)):
                    names_seen.setdefault(base, []).append(f"{name}: src/{rel}")
            mod = module_of(rel)
            code = cfg_test_blocks_removed(strip_comments(text))
            if re.search(r"\bfn\s+run\s*[<(]", code):
                runs.append(f"src/{rel}")
            edges[mod] = imports(mod, code, modules, reexports)
    for base, rels in sorted(by_name.items()):
        if len(rels) > 1:
            problems.append(f"{name}: {len(rels)} files named {base}: " + ", ".join(f"src/{r}" for r in rels))
    if len(runs) > 1:
        problems.append(f"{name}: {len(runs)} files define a function named run: " + ", ".join(runs))
    for comp in find_cycles(edges):
        ties = []
        members = set(comp)
        for v in comp:
            for w in sorted(edges[v] & members):
                ties.append(f"src/{modfile[v]} -> src/{modfile[w]}")
        problems.append(f"{name}: import cycle among {len(comp)} modules: " + "; ".join(ties))
    if name == "clonestage-server":
        for v, ws in sorted(edges.items()):
            for w in sorted(ws):
                a, b = (v[0] if v else ""), (w[0] if w else "")
                if a == b or not a or not b:
                    continue
                if (
                    (a == "state" and b in SERVER_SERVICES)
                    or (a in SERVER_SERVICES and b in SERVER_SERVICES and b != "capabilities")
                    or b == SERVER_CLIENT_SIDE
                    or (a == SERVER_CLIENT_SIDE and b in SERVER_SERVING_CORE)
                ):
                    problems.append(f"{name}: src/{modfile[v]} reaches into {'::'.join(w)}")
    if name == "clonestage-engine":
        problems += layer_problems(name, edges, modfile, ENGINE_LAYERS)
    top = {}
    if name not in TOP_LEVEL_ACYCLIC:
        return problems
    for v, ws in edges.items():
        if v:
            top.setdefault(v[0], set()).update(w[0] for w in ws if w and w[0] != v[0])
    for comp in find_cycles(top):
        members = set(comp)
        ties = []
        for v in comp:
            for w in sorted(top[v] & members):
                files_ = sorted(f"src/{modfile[a]}" for a in edges if a and a[0] == v and any(b and b[0] == w for b in edges[a]))
                ties.append(f"{v} -> {w} ({', '.join(files_)})")
        problems.append(f"{name}: import cycle among top-level modules {', '.join(comp)}: " + "; ".join(ties))
    return problems


def layer_problems(name, edges, modfile, layers):
    """Rule 7: each top-level module in one layer, importing only from lower ones."""
    problems = []
    layer_of = {m: i for i, layer in enumerate(layers) for m in layer}
    for top in sorted({v[0] for v in edges if v}):
        if top not in layer_of:
            problems.append(f"{name}: top-level module {top} is in no layer of the crate's layer order")
    for v, ws in sorted(edges.items()):
        a = v[0] if v else ""
        for w in sorted(ws):
            b = w[0] if w else ""
            if not a or not b or a == b or a not in layer_of or b not in layer_of:
                continue
            if layer_of[b] >= layer_of[a]:
                where = "a higher layer" if layer_of[b] > layer_of[a] else "its own layer"
                problems.append(f"{name}: src/{modfile[v]} imports {'::'.join(w)}, from {where} ({a} may import only from below)")
    return problems


def main(argv):
    if len(argv) > 2:
        print("usage: check.py [RUST_DIR]", file=sys.stderr)
        return 2
    rust = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "rust")
    with open(os.path.join(rust, "Cargo.toml"), "rb") as fh:
        members = tomllib.load(fh)["workspace"]["members"]
    problems = []
    names_seen = {}
    for member in members:
        crate_dir = os.path.join(rust, member)
        with open(os.path.join(crate_dir, "Cargo.toml"), "rb") as fh:
            name = tomllib.load(fh)["package"]["name"]
        problems += check_crate(crate_dir, name, names_seen)
    for base, where in sorted(names_seen.items()):
        crates = {w.split(":")[0] for w in where}
        if len(crates) > 1:
            problems.append(f"{len(where)} files named {base} in different crates: " + ", ".join(where))
    for p in problems:
        print(p)
    if problems:
        print(f"layout: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"layout: {len(members)} crates checked, no problem")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
