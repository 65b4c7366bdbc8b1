//! Validation of everything a client can put in a tree: names, ordering, duplicates and
//! symlink targets; and of output paths. Run before anything is created.

use super::{join, Directory};
use crate::digest::Digest;
use crate::error::{Error, Result};

/// What symlink targets a stage accepts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SymlinkPolicy {
    /// Accept absolute targets (they point outside the root by definition).
    pub allow_absolute: bool,
    /// Accept relative targets that climb above the root with `..`.
    pub allow_escaping: bool,
}

/// The longest name a directory entry can have (Linux NAME_MAX; APFS allows as many bytes).
pub const NAME_MAX: usize = 255;
/// The longest path the kernel accepts, its terminating NUL included (Linux PATH_MAX).
pub const PATH_MAX: usize = 4096;

/// A single path component: not empty, `.`, `..`, without `/` or NUL, at most NAME_MAX bytes
/// (a longer one fails with ENAMETOOLONG half-way through a stage).
pub fn validate_name(name: &str) -> std::result::Result<(), String> {
    if name.is_empty() {
        return Err("empty name".into());
    }
    if name.len() > NAME_MAX {
        return Err(format!(
            "name '{}...' is {} bytes, longer than NAME_MAX ({NAME_MAX})",
            name.chars().take(16).collect::<String>(),
            name.len()
        ));
    }
    if name == "." || name == ".." {
        return Err(format!("name '{name}' is not allowed"));
    }
    if name.contains('/') {
        return Err(format!("name '{name}' contains '/'"));
    }
    if name.contains('\0') {
        return Err(format!("name {name:?} contains NUL"));
    }
    Ok(())
}

/// Check one Directory found at `path` (relative to the root; "" for the root itself).
pub fn validate_directory(
    dir: &Directory,
    path: &str,
    digest: &Digest,
    policy: SymlinkPolicy,
) -> Result<()> {
    let bad = |what: String| Error::InvalidTree {
        path: path.to_string(),
        digest: *digest,
        reason: what,
    };
    // Each kind sorted strictly (so no duplicates within it), then no name shared between
    // kinds: a merge of the sorted lists, no allocation. This runs once per Directory of
    // every cold stage.
    fn sorted<'a>(
        kind: &str,
        names: impl Iterator<Item = &'a str>,
        bad: &dyn Fn(String) -> Error,
    ) -> Result<()> {
        let mut prev: Option<&str> = None;
        for (i, n) in names.enumerate() {
            validate_name(n).map_err(|r| bad(format!("{kind}[{i}]: {r}")))?;
            match prev.map(|p| p.cmp(n)) {
                None | Some(std::cmp::Ordering::Less) => {}
                Some(std::cmp::Ordering::Equal) => {
                    return Err(bad(format!("duplicate name '{n}' in {kind}")))
                }
                Some(std::cmp::Ordering::Greater) => {
                    return Err(bad(format!(
                        "{kind} not sorted: '{}' before '{n}'",
                        prev.unwrap_or_default()
                    )))
                }
            }
            prev = Some(n);
        }
        Ok(())
    }
    /// The first name two strictly sorted lists share.
    fn common<'a>(
        mut a: impl Iterator<Item = &'a str>,
        mut b: impl Iterator<Item = &'a str>,
    ) -> Option<&'a str> {
        let (mut x, mut y) = (a.next()?, b.next()?);
        loop {
            match x.cmp(y) {
                std::cmp::Ordering::Less => x = a.next()?,
                std::cmp::Ordering::Greater => y = b.next()?,
                std::cmp::Ordering::Equal => return Some(x),
            }
        }
    }
    let files = || dir.files.iter().map(|f| f.name.as_str());
    let dirs = || dir.directories.iter().map(|d| d.name.as_str());
    let links = || dir.symlinks.iter().map(|s| s.name.as_str());
    sorted("files", files(), &bad)?;
    sorted("directories", dirs(), &bad)?;
    sorted("symlinks", links(), &bad)?;
    if let Some(n) = common(files(), dirs())
        .or_else(|| common(files(), links()))
        .or_else(|| common(dirs(), links()))
    {
        return Err(bad(format!(
            "name '{n}' used by two entries of different kinds"
        )));
    }
    // The entry's name is enough context: `bad` adds the directory's path and digest.
    for f in &dir.files {
        Digest::from_opt_proto(f.digest.as_ref(), &f.name).map_err(|e| bad(e.to_string()))?;
    }
    for d in &dir.directories {
        Digest::from_opt_proto(d.digest.as_ref(), &d.name).map_err(|e| bad(e.to_string()))?;
    }
    let depth = if path.is_empty() {
        0
    } else {
        path.split('/').count()
    };
    for s in &dir.symlinks {
        check_symlink_target(&s.target, depth, policy).map_err(|r| {
            bad(format!(
                "symlink '{}' -> '{}': {r}",
                join(path, &s.name),
                s.target
            ))
        })?;
    }
    Ok(())
}

/// A symlink at directory depth `depth` (root = 0) with `target`: what `policy` accepts (used for
/// the symlinks of a tree to stage, and of a result to store).
pub fn check_symlink_target(
    target: &str,
    depth: usize,
    policy: SymlinkPolicy,
) -> std::result::Result<(), String> {
    if target.is_empty() {
        return Err("empty target".into());
    }
    if target.contains('\0') {
        return Err("target contains NUL".into());
    }
    if target.len() >= PATH_MAX {
        return Err(format!(
            "target is {} bytes, longer than PATH_MAX allows ({})",
            target.len(),
            PATH_MAX - 1
        ));
    }
    if target.starts_with('/') {
        return if policy.allow_absolute {
            Ok(())
        } else {
            Err("absolute target".into())
        };
    }
    let mut level = depth as i64;
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                level -= 1;
                if level < 0 && !policy.allow_escaping {
                    return Err("target climbs out of the root".into());
                }
            }
            _ => level += 1,
        }
    }
    Ok(())
}

/// An output path relative to the root: normalized, no `..`, no empty or `.` components, each
/// at most NAME_MAX bytes and the whole shorter than PATH_MAX (a caller that knows the prefix
/// the path will be used under checks the sum).
pub fn check_output_path(p: &str) -> Result<Vec<&str>> {
    if p.is_empty() || p.starts_with('/') {
        return Err(Error::InvalidArgument(format!(
            "output path '{p}' must be relative and non-empty"
        )));
    }
    if p.len() >= PATH_MAX {
        return Err(Error::InvalidArgument(format!(
            "output path '{}...' is {} bytes, longer than PATH_MAX allows ({})",
            p.chars().take(32).collect::<String>(),
            p.len(),
            PATH_MAX - 1
        )));
    }
    let parts: Vec<&str> = p.trim_end_matches('/').split('/').collect();
    for c in &parts {
        validate_name(c).map_err(|r| Error::InvalidArgument(format!("output path '{p}': {r}")))?;
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlink_targets() {
        let p = SymlinkPolicy::default();
        assert!(check_symlink_target("a/b", 0, p).is_ok());
        assert!(check_symlink_target("../x", 1, p).is_ok());
        assert!(check_symlink_target("../x", 0, p).is_err());
        assert!(check_symlink_target("a/../../x", 0, p).is_err());
        assert!(check_symlink_target("/etc/passwd", 3, p).is_err());
        assert!(check_symlink_target("", 0, p).is_err());
        let lax = SymlinkPolicy {
            allow_absolute: true,
            allow_escaping: true,
        };
        assert!(check_symlink_target("/etc/passwd", 0, lax).is_ok());
        assert!(check_symlink_target("../../x", 0, lax).is_ok());
    }

    #[test]
    fn output_paths() {
        assert_eq!(check_output_path("a/b/c").unwrap(), vec!["a", "b", "c"]);
        for bad in ["", "/abs", "a/../b", "a//b", "./a", "a/./b"] {
            assert!(check_output_path(bad).is_err(), "{bad} accepted");
        }
        let e = check_output_path(&format!("a/{}", "n".repeat(256))).unwrap_err();
        assert!(e.to_string().contains("NAME_MAX"), "{e}");
        assert!(check_output_path(&format!("a/{}", "n".repeat(255))).is_ok());
        let e = check_output_path(&vec!["d".repeat(200); 21].join("/")).unwrap_err();
        assert!(e.to_string().contains("PATH_MAX"), "{e}");
        assert!(validate_name(&"n".repeat(256)).is_err());
        assert!(check_symlink_target(&"a/".repeat(2048), 0, SymlinkPolicy::default()).is_err());
    }
}
