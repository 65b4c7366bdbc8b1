//! The five input shapes of the published SwiftCompile staging benchmark, generated as an
//! action root: every file lives below `root/sdk/` (the engine never caches the root itself,
//! only subtrees, so the tree must have one to cache).
//!
//! Content is deterministic (a splitmix64 stream seeded by shape and file index) and distinct
//! per file, so no two files share a digest and dedup cannot make a shape trivial.
//!
//! A generated tree comes with its `Manifest` (directories and files in creation order), which
//! the raw methods (`raw.rs`) walk instead of reading the tree back.

use anyhow::{Context, Result};
use std::ffi::CString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A generated tree: `dirs[0]` is the root itself; every other dir has a parent index that
/// comes before it.
pub struct Manifest {
    pub dirs: Vec<DirEnt>,
    pub files: Vec<FileEnt>,
    pub bytes: u64,
}

pub struct DirEnt {
    pub parent: usize,
    pub name: CString,
    /// Relative to the root ("" for the root).
    pub rel: PathBuf,
}

pub struct FileEnt {
    pub dir: usize,
    pub name: CString,
    /// Absolute source path (the symlink forest's target).
    pub target: CString,
}

#[derive(Debug, Clone, Copy)]
pub enum Layout {
    /// All files in `root/sdk/`.
    Flat,
    /// Directories below `root/sdk/` with these fan-outs per level, files spread evenly over
    /// the leaf directories.
    Nested(&'static [usize]),
}

#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub name: &'static str,
    pub files: usize,
    pub file_size: usize,
    pub layout: Layout,
}

/// deep_nested: 5 directory levels (`sdk/aN/bN/cN/dN/`), fan-out 2·2·2·5 = 40 leaf
/// directories with 5 files each, i.e. files sit 6 components below the root.
pub const SHAPES: [Shape; 5] = [
    Shape {
        name: "small_flat",
        files: 64,
        file_size: 1024,
        layout: Layout::Flat,
    },
    Shape {
        name: "pcm_cluster",
        files: 219,
        file_size: 190 * 1024,
        layout: Layout::Flat,
    },
    Shape {
        name: "deep_nested",
        files: 200,
        file_size: 256 * 1024,
        layout: Layout::Nested(&[2, 2, 2, 5]),
    },
    Shape {
        name: "medium_flat",
        files: 635,
        file_size: 290 * 1024,
        layout: Layout::Flat,
    },
    Shape {
        name: "large_flat",
        files: 1978,
        file_size: 245 * 1024,
        layout: Layout::Flat,
    },
];

impl Shape {
    pub fn by_name(name: &str) -> Option<Shape> {
        SHAPES.iter().copied().find(|s| s.name == name)
    }

    pub fn describe(&self) -> String {
        let layout = match self.layout {
            Layout::Flat => "flat in root/sdk/".to_string(),
            Layout::Nested(f) => {
                let leaves: usize = f.iter().product();
                format!(
                    "nested {} levels below root/sdk/ (fan-out {}), {} leaf dirs",
                    f.len() + 1,
                    f.iter()
                        .map(|n| n.to_string())
                        .collect::<Vec<_>>()
                        .join("·"),
                    leaves
                )
            }
        };
        format!(
            "{} files x {} KiB = {:.0} MiB, {}",
            self.files,
            self.file_size / 1024,
            (self.files * self.file_size) as f64 / (1 << 20) as f64,
            layout
        )
    }

    /// Write the tree under `root` (which must not exist) and return its manifest. Files are
    /// made read-only (0o444), like inputs in a cache.
    pub fn generate(&self, root: &Path) -> Result<Manifest> {
        let mut m = Manifest {
            dirs: vec![DirEnt {
                parent: 0,
                name: CString::default(),
                rel: "".into(),
            }],
            files: Vec::with_capacity(self.files),
            bytes: 0,
        };
        std::fs::create_dir(root).with_context(|| format!("mkdir {}", root.display()))?;
        let sdk = add_dir(&mut m, root, 0, "sdk")?;
        let leaves: Vec<usize> = match self.layout {
            Layout::Flat => vec![sdk],
            Layout::Nested(fanout) => {
                let mut level = vec![sdk];
                for (depth, &n) in fanout.iter().enumerate() {
                    let prefix = (b'a' + depth as u8) as char;
                    let mut next = Vec::new();
                    for &p in &level {
                        for i in 0..n {
                            next.push(add_dir(&mut m, root, p, &format!("{prefix}{i}"))?);
                        }
                    }
                    level = next;
                }
                level
            }
        };
        let seed = self.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        let mut buf = vec![0u8; self.file_size];
        for i in 0..self.files {
            let dir = leaves[i * leaves.len() / self.files];
            let name = format!("f{i:04}");
            let path = root.join(&m.dirs[dir].rel).join(&name);
            fill(
                &mut buf,
                seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            );
            let mut f = std::fs::File::create(&path)
                .with_context(|| format!("create {}", path.display()))?;
            f.write_all(&buf)
                .with_context(|| format!("write {}", path.display()))?;
            f.set_permissions(std::fs::Permissions::from_mode(0o444))?;
            let abs = std::path::absolute(&path)?;
            m.files.push(FileEnt {
                dir,
                name: CString::new(name)?,
                target: CString::new(abs.as_os_str().as_bytes())?,
            });
            m.bytes += buf.len() as u64;
        }
        Ok(m)
    }
}

fn add_dir(m: &mut Manifest, root: &Path, parent: usize, name: &str) -> Result<usize> {
    let rel = m.dirs[parent].rel.join(name);
    let p = root.join(&rel);
    std::fs::create_dir(&p).with_context(|| format!("mkdir {}", p.display()))?;
    m.dirs.push(DirEnt {
        parent,
        name: CString::new(name)?,
        rel,
    });
    Ok(m.dirs.len() - 1)
}

/// splitmix64 bytes.
fn fill(buf: &mut [u8], mut state: u64) {
    for chunk in buf.chunks_mut(8) {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_le_bytes()[..chunk.len()]);
    }
}
