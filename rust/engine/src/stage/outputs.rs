//! Declared outputs: the directory chain from the root to each output's parent must exist and
//! be writable (0o755), even where it runs through cloned, read-only input directories,
//! because Bazel puts outputs in directories that also hold inputs. Directories are never
//! shared inodes (hardlinks are files only; clones and snapshots are private), so chmod is safe.

use crate::error::{Error, IoContext, Result};
use crate::platform::{cstr, Dir};
use std::collections::HashSet;
use std::path::Path;

pub(crate) fn make_output_parents(
    root: &Dir,
    root_path: &Path,
    outputs: &[Vec<&str>],
) -> Result<()> {
    let mut done: HashSet<String> = HashSet::new();
    for parts in outputs {
        let mut dir = None::<Dir>;
        let mut rel = String::new();
        for c in &parts[..parts.len() - 1] {
            if !rel.is_empty() {
                rel.push('/');
            }
            rel.push_str(c);
            let here = dir.as_ref().unwrap_or(root);
            let name = cstr(c).ctx("name", root_path.join(&rel))?;
            let child = match here.stat_at(&name) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
                    let child = here.open_at(&name).ctx("open", root_path.join(&rel))?;
                    if done.insert(rel.clone()) {
                        child.chmod(0o755).ctx("chmod", root_path.join(&rel))?;
                    }
                    child
                }
                Ok(_) => {
                    return Err(Error::InvalidArgument(format!(
                        "output '{}': '{rel}' is not a directory in the input tree",
                        parts.join("/")
                    )))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    done.insert(rel.clone());
                    let child = here
                        .mkdir_at(&name, 0o755)
                        .ctx("mkdir", root_path.join(&rel))?;
                    child.chmod(0o755).ctx("chmod", root_path.join(&rel))?;
                    child
                }
                Err(e) => return Err(Error::io("lstat", root_path.join(&rel), e)),
            };
            dir = Some(child);
        }
    }
    Ok(())
}
