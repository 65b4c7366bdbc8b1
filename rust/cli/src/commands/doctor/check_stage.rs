//! `stage`: a trial stage of a small tree into the cache's scratch directory, by the method
//! the server would use, with the permission contract (docs/permissions.md) verified on the
//! result: root 0o755, input files 0o444 or 0o555, input directories 0o555, the chain to a
//! declared output 0o755, the empty file and a symlink recreated, every byte as ingested, no
//! input reported as written. Then the same tree with `--preserve-inodes macho` (links made
//! in the root, as where the minimum link age is zero): its Mach-O dylib must be the cache's
//! inode where the filesystem clones, everything else as before.

use super::report::Outcome;
use super::Context;
use clonestage_engine::stage::{CodePolicy, PreserveInodes};
use clonestage_engine::tree::{self, IngestOptions};
use clonestage_engine::{Digest, StageRequest, Stager};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

/// A minimal 64-bit little-endian Mach-O header of type `MH_DYLIB` (<mach-o/loader.h>),
/// padded: what the cache records as code.
fn dylib_bytes() -> Vec<u8> {
    let mut v = vec![0u8; 4096];
    v[..4].copy_from_slice(&0xfeed_facf_u32.to_le_bytes());
    v[4..8].copy_from_slice(&0x0100_000c_u32.to_le_bytes());
    v[12..16].copy_from_slice(&6u32.to_le_bytes());
    v
}

/// The files of the trial tree: (path, bytes, executable).
fn files() -> Vec<(String, Vec<u8>, bool)> {
    let mut v: Vec<(String, Vec<u8>, bool)> = (0..24)
        .map(|i| {
            (
                format!("sdk/m{}/h{i}.h", i % 3),
                format!("// header {i}\n").into_bytes(),
                false,
            )
        })
        .collect();
    v.push(("pkg/a.swift".into(), b"let x = 1\n".to_vec(), false));
    v.push((
        "pkg/tool".into(),
        b"#!/bin/sh\necho doctor\n".to_vec(),
        true,
    ));
    v.push(("pkg/empty".into(), Vec::new(), false));
    v.push(("lib/libDoctor.dylib".into(), dylib_bytes(), false));
    v
}

const OUTPUT: &str = "pkg/gen/out.o";

pub fn check(ctx: &mut Context) -> Outcome {
    let Some(cache) = ctx.cache.clone() else {
        return Outcome::skip("no cache (see filesystem)");
    };
    let dir = match ctx.scratch("stage") {
        Ok(d) => d,
        Err(e) => return Outcome::fail(format!("{e:#}")),
    };
    let src = dir.join("src");
    for (rel, data, exec) in files() {
        let p = src.join(&rel);
        let r = std::fs::create_dir_all(p.parent().expect("nested"))
            .and_then(|_| std::fs::write(&p, &data))
            .and_then(|_| {
                let mode = if exec { 0o755 } else { 0o644 };
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
            });
        if let Err(e) = r {
            return Outcome::fail(format!(
                "cannot write the trial tree at {}: {e}",
                p.display()
            ));
        }
    }
    if let Err(e) = std::os::unix::fs::symlink("a.swift", src.join("pkg/link")) {
        return Outcome::fail(format!("symlink in {}: {e}", src.display()));
    }
    let root = match tree::ingest_path(&cache, &src, IngestOptions::default()) {
        Ok(d) => d,
        Err(e) => {
            return Outcome::fail(format!(
                "cannot ingest the trial tree {}: {e}",
                src.display()
            ))
        }
    };
    let plain = Stager::new(cache.clone());
    let staged = match stage(&plain, root, &dir.join("root")) {
        Ok(s) => s,
        Err(e) => return Outcome::fail(e),
    };
    if let Err(e) = verify(&dir.join("root"), &src) {
        return Outcome::fail(format!(
            "the trial root breaks the permission contract: {e}"
        ));
    }
    let c = &staged.0;
    let methods = format!(
        "clonefile {} reflink {} snapshot {} hardlink {} copy {} in {:.1} ms",
        c.clonefile,
        c.reflink,
        c.snapshot,
        c.hardlink,
        c.copy,
        staged.1 as f64 / 1e3
    );
    let macho = Stager::new(cache.clone())
        .with_code_policy(CodePolicy::new(PreserveInodes::Macho).with_min_link_age(Duration::ZERO));
    let linked = match stage(&macho, root, &dir.join("macho")) {
        Ok(s) => s,
        Err(e) => return Outcome::fail(format!("with --preserve-inodes macho: {e}")),
    };
    if let Err(e) = verify(&dir.join("macho"), &src) {
        return Outcome::fail(format!(
            "with --preserve-inodes macho the trial root breaks the permission contract: {e}"
        ));
    }
    let dylib = cache.blob_path(&Digest::of_bytes(&dylib_bytes()));
    let same = |p: &Path| std::fs::metadata(p).map(|m| m.ino()).ok();
    let shares =
        same(&dir.join("macho/lib/libDoctor.dylib")) == same(&dylib) && same(&dylib).is_some();
    let code = if ctx.clones == Some(true) && !shares {
        return Outcome::fail(format!(
            "with --preserve-inodes macho the trial Mach-O dylib is not the cache's inode ({} code linked): staging did not preserve it",
            linked.0.code_linked
        ));
    } else if shares {
        "with --preserve-inodes macho the Mach-O dylib is the cache's own inode and the rest cloned"
    } else {
        "no clones here, so every input is the cache's inode anyway"
    };
    Outcome::pass(format!(
        "staged {} files ({methods}); the permission contract holds (modes, output chain {OUTPUT}, empty file, symlink, contents, no write seen); {code}",
        files().len() + 1
    ))
}

/// Stage `root` at `dest` with one declared output; (counters, microseconds) or why not.
fn stage(
    st: &Stager,
    root: Digest,
    dest: &Path,
) -> Result<(clonestage_engine::stats::Counters, u64), String> {
    let s = st
        .stage(&StageRequest {
            root,
            dest: dest.to_path_buf(),
            outputs: vec![OUTPUT.into()],
            ..Default::default()
        })
        .map_err(|e| format!("trial stage into {}: {e}", dest.display()))?;
    let tampered = s.check_inputs();
    if !tampered.is_empty() {
        return Err(format!(
            "untouched inputs reported as written: {tampered:?}"
        ));
    }
    Ok((s.counters.clone(), s.micros))
}

fn mode(p: &Path) -> std::io::Result<u32> {
    Ok(std::fs::symlink_metadata(p)?.mode() & 0o7777)
}

/// The contract, line by line, on a root staged from `src` (files(), `pkg/link`, `OUTPUT`).
fn verify(root: &Path, src: &Path) -> Result<(), String> {
    let want = |rel: &str, m: u32| -> Result<(), String> {
        let p = root.join(rel);
        match mode(&p) {
            Ok(got) if got == m => Ok(()),
            Ok(got) => Err(format!("{} is {got:o}, not {m:o}", p.display())),
            Err(e) => Err(format!("{}: {e}", p.display())),
        }
    };
    want("", 0o755)?;
    for d in ["sdk", "sdk/m0", "sdk/m2", "lib"] {
        want(d, 0o555)?;
    }
    for d in ["pkg", "pkg/gen"] {
        want(d, 0o755)?;
    }
    for (rel, data, exec) in files() {
        want(&rel, if exec { 0o555 } else { 0o444 })?;
        let got = std::fs::read(root.join(&rel)).map_err(|e| format!("read {rel}: {e}"))?;
        if got != data {
            return Err(format!("{rel} differs from {}", src.join(&rel).display()));
        }
    }
    let link = root.join("pkg/link");
    match std::fs::read_link(&link) {
        Ok(t) if t == Path::new("a.swift") => Ok(()),
        Ok(t) => Err(format!(
            "{} points to {}, not a.swift",
            link.display(),
            t.display()
        )),
        Err(e) => Err(format!("{} is not a symlink: {e}", link.display())),
    }
}
