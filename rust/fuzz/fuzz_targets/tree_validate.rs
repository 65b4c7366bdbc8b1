//! Fuzz target: the engine's validation of client trees (`validate_directory` on any bytes
//! that decode as a REAPI `Directory`, under each symlink policy) and of output paths
//! (`check_output_path`). Finds panics, and checks two promises: an accepted output path has
//! only plain components, and under the strict policy no accepted symlink target is absolute
//! or climbs above the root when its `..`s are counted from the directory holding it.
#![no_main]

use clonestage_engine::tree::{
    check_output_path, validate_directory, validate_name, SymlinkPolicy,
};
use clonestage_engine::Digest;
use libfuzzer_sys::fuzz_target;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let policy = SymlinkPolicy {
        allow_absolute: flags & 1 != 0,
        allow_escaping: flags & 2 != 0,
    };
    // Input: an output path, a 0xff byte, then a Directory message.
    let split = rest.iter().position(|&b| b == 0xff).unwrap_or(rest.len());
    let (path, msg) = rest.split_at(split);
    if let Ok(p) = std::str::from_utf8(path) {
        if let Ok(parts) = check_output_path(p) {
            assert!(!p.starts_with('/'), "absolute output path {p:?} accepted");
            for c in parts {
                assert!(
                    validate_name(c).is_ok(),
                    "output path {p:?} accepted with component {c:?}"
                );
            }
        }
    }
    let Ok(dir) = clonestage_engine::tree::Directory::decode(msg.get(1..).unwrap_or(&[])) else {
        return;
    };
    // The Directory sits at a depth chosen by the input, as a subdirectory would.
    let depth = (flags >> 2) as usize % 4;
    let at: Vec<&str> = ["a", "b", "c"][..depth].to_vec();
    let digest = Digest::of_bytes(msg);
    if validate_directory(&dir, &at.join("/"), &digest, policy).is_ok()
        && !policy.allow_escaping
        && !policy.allow_absolute
    {
        for s in &dir.symlinks {
            assert!(
                !s.target.starts_with('/'),
                "absolute target {:?} accepted",
                s.target
            );
            let mut level = depth as i64;
            for c in s.target.split('/') {
                match c {
                    "" | "." => {}
                    ".." => level -= 1,
                    _ => level += 1,
                }
                assert!(
                    level >= 0,
                    "target {:?} at depth {depth} climbs out, accepted",
                    s.target
                );
            }
        }
    }
});
