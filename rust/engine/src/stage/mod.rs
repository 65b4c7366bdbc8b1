//! The stager: materialize a tree digest into a directory that does not exist yet.
//!
//! The root is built under a temporary sibling name and renamed into place without replacing,
//! so a destination is either absent or complete: a failed stage removes what it built, a
//! killed one leaves only a `.cs-<pid>-*` sibling (swept by the server at start), and a
//! destination that appeared meanwhile is refused and left untouched.
//!
//! The permission contract (docs/permissions.md, tested line by line in `tests.rs`):
//! root 0o755; input files 0o444 (0o555 if executable); input dirs 0o555; the chain from the
//! root to each declared output's parent exists and is 0o755; hardlinked files are never
//! chmod'ed, utime'd or opened for writing; symlinks are recreated, never followed; the empty
//! file is created directly.
//!
//! One deliberate exception (docs/permissions.md, "Shared cache directories"): where a pattern
//! of the stager's `SharedDirs` matches a path the action does not declare, that path is a
//! symlink to a persistent directory shared by every root (`shared_map`), its chain writable.

mod code_links;
mod device;
mod fill;
mod limits;
mod links;
mod modes;
mod outputs;
mod place;
mod plan;
pub mod pool;
mod request;
mod shared_map;
mod staged;
mod subtree;
mod tamper;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_code;
#[cfg(test)]
mod tests_hostile;
#[cfg(test)]
mod tests_ledger;
#[cfg(test)]
mod tests_shared;

pub use code_links::{CodePolicy, PreserveInodes};
pub use device::{DeviceProfile, FileMethod, MethodPreference};
pub use limits::TreeLimits;
pub use links::MAX_HOPS;
pub use pool::{Discard, Loan, Pool, PoolBounds, POOL_MIN_ENTRIES};
pub use request::StageRequest;
pub use shared_map::MAX_PER_PATTERN as SHARED_MAX_PER_PATTERN;
pub use staged::StagedRoot;
pub use subtree::{SUBTREE_MIN_SIGHTINGS, SUBTREE_PAYOFF};

use crate::cas::Cache;
use crate::digest::Digest;
use crate::error::{Error, IoContext, Result};
use crate::ledger::Ledger;
use crate::platform::{self, cstr, Dir};
use crate::tree;
use modes::Modes;
use std::collections::HashSet;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub struct Stager {
    cache: Arc<Cache>,
    devices: Arc<device::Devices>,
    /// Every stage's bookkeeping, written when whoever runs this stager flushes it.
    ledger: Arc<Ledger>,
    seen: Mutex<Option<HashSet<Digest>>>,
    memo: plan::Memo,
    modes: Modes,
    limits: TreeLimits,
    seq: AtomicU64,
    /// Ready copies of hot subtrees (`with_pool`); None: every subtree is staged.
    pool: Option<Arc<Pool>>,
    /// `--preserve-inodes`: which inputs keep the cache's inode (`code_links`).
    code: CodePolicy,
}

impl Stager {
    pub fn new(cache: Arc<Cache>) -> Stager {
        let modes = Modes::of_this_process(&cache);
        let devices = Arc::new(device::Devices::default());
        Stager {
            ledger: Arc::new(Ledger::new(cache.clone(), devices.clone())),
            cache,
            devices,
            seen: Mutex::new(None),
            memo: Default::default(),
            modes,
            limits: TreeLimits::default(),
            seq: AtomicU64::new(0),
            pool: None,
            code: CodePolicy::default(),
        }
    }

    /// Stage Mach-O code as links to the cache's inodes (`--preserve-inodes macho`), made in
    /// roots or ahead in the pool's copies as `policy.min_link_age` allows (`code_links`).
    pub fn with_code_policy(mut self, policy: CodePolicy) -> Stager {
        self.code = policy;
        self
    }

    pub fn code_policy(&self) -> CodePolicy {
        self.code
    }

    /// Keep a pool of ready copies of hot subtrees in `<cache>/pool/` (emptied now: an earlier
    /// process's copies have no record), within `bounds`. Roots then take subtrees from it;
    /// whoever runs this stager builds copies (`build_pooled`) and returns them
    /// (`StagedRoot::take_loans`, `Pool::recycle`).
    pub fn with_pool(mut self, bounds: PoolBounds) -> Result<Stager> {
        self.enable_pool(bounds)?;
        Ok(self)
    }

    /// `with_pool` in place (on error the stager stays without a pool).
    pub fn enable_pool(&mut self, bounds: PoolBounds) -> Result<()> {
        let chmod_to_move = !self.modes.dirs_direct;
        self.pool = Some(Arc::new(Pool::new(
            &self.cache,
            self.ledger.clone(),
            bounds,
            chmod_to_move,
        )?));
        Ok(())
    }

    pub fn pool(&self) -> Option<&Arc<Pool>> {
        self.pool.as_ref()
    }

    /// Hold every tree this stager stages to `limits` instead of the defaults.
    pub fn with_limits(mut self, limits: TreeLimits) -> Stager {
        self.limits = limits;
        self
    }

    pub fn limits(&self) -> TreeLimits {
        self.limits
    }

    /// The portable way to every mode (directories made 0o755 and chmod'ed once full, a
    /// final chmod of the root), whatever this process could skip: the path non-root users
    /// take.
    #[cfg(test)]
    pub(crate) fn without_mode_shortcuts(mut self) -> Stager {
        self.modes.dirs_direct = false;
        self.modes.root_exact = false;
        self
    }

    pub fn cache(&self) -> &Arc<Cache> {
        &self.cache
    }

    /// Where every stage's counters, root and cost estimates wait until flushed: the caller
    /// running this stager flushes it (`Ledger::flush`), and may add its own counters.
    pub fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// The method this stager would use for destinations under `dir` (probing if needed).
    pub fn profile_for(&self, dir: &Path) -> Result<DeviceProfile> {
        let key = device::Devices::key(&self.cache, dir).ctx("stat", dir)?;
        Ok(self.devices.get(&self.cache, key, dir))
    }

    pub fn stage(&self, req: &StageRequest) -> Result<StagedRoot> {
        let t0 = Instant::now();
        let r = self.stage_inner(req, t0);
        if r.is_err() {
            self.ledger.add(|c| c.stage_failures += 1);
        }
        r
    }

    fn stage_inner(&self, req: &StageRequest, t0: Instant) -> Result<StagedRoot> {
        for o in &req.outputs {
            tree::check_output_path(o)?;
        }
        if !req.working_dir.is_empty() {
            tree::check_output_path(&req.working_dir).map_err(|e| {
                Error::InvalidArgument(format!("working directory '{}': {e}", req.working_dir))
            })?;
        }
        let dest = &req.dest;
        let name = dest.file_name().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "destination '{}' has no final name",
                dest.display()
            ))
        })?;
        let parent = match dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        // Everything below is relative to the parent's fd: one path walk per stage.
        let parent_dir = Dir::open(&parent).ctx("open", &parent)?;
        let name_c = cstr(name).ctx("name", dest)?;
        if parent_dir.stat_at(&name_c).is_ok() {
            return Err(Error::DestinationExists(dest.clone()));
        }
        let pin = self.cache.pin(&req.root)?;
        let quarantine_mark = self.cache.quarantine_mark();
        if self.code.preserves() {
            // Code blobs another process recorded since the last stage (one stat if none).
            self.cache.refresh_code_record();
        }
        let t_plan = Instant::now();
        let plan = plan::Plan::load(
            &self.cache,
            &self.memo,
            &req.root,
            req.symlinks,
            &self.limits,
        )?;
        links::check(&plan, &req.root, req.symlinks)?;
        let working_dir = links::resolve_dir(
            &plan,
            &req.root,
            req.working_dir.trim_end_matches('/'),
            "working directory",
        )?;
        let outputs: Vec<String> = req
            .outputs
            .iter()
            .map(|o| tree::join(&working_dir, o.trim_end_matches('/')))
            .collect();
        let outputs: Vec<Vec<&str>> = outputs
            .iter()
            .map(|o| tree::check_output_path(o))
            .collect::<Result<_>>()?;
        // Shared cache directories: matched against the tree and the outputs' chains, held
        // (`Lease`) before anything is built, their chains made writable like an output's.
        let shared = match &req.shared {
            Some(s) if !s.patterns().is_empty() => {
                let m = shared_map::expand(&plan, &req.root, s.patterns(), &outputs)?;
                Some((s.lease(&m.rels)?, m))
            }
            _ => None,
        };
        let shared_rels: Vec<Vec<&str>> = shared
            .iter()
            .flat_map(|(l, _)| l.dirs())
            .map(|(rel, _)| rel.split('/').collect())
            .collect();
        let writable: Vec<Vec<&str>> = outputs.iter().chain(&shared_rels).cloned().collect();
        let plan_us = t_plan.elapsed().as_micros() as u64;

        let key = device::Devices::key_of(&self.cache, &parent_dir).ctx("fstat", &parent)?;
        let prof = self.devices.get(&self.cache, key, &parent);
        let (method, tree_clone) = match req.method {
            MethodPreference::Auto => (prof.file_method, prof.tree_clone),
            MethodPreference::Clone => (FileMethod::Clone, prof.tree_clone),
            MethodPreference::Hardlink => (FileMethod::Hardlink, None),
            MethodPreference::Copy => (FileMethod::Copy, None),
        };
        let tmp_name = format!(
            ".cs-{}-{}.tmp",
            std::process::id(),
            self.seq.fetch_add(1, Ordering::Relaxed)
        );
        let tmp = parent.join(&tmp_name);
        let mut b = fill::Builder::new(
            &plan,
            fill::Setup {
                cache: &self.cache,
                devices: &self.devices,
                seen: &self.seen,
                key,
                method,
                tree_clone,
                costs: (prof.file_us, prof.tree_clone_us),
                modes: self.modes,
                code: self.code,
                code_mode: self.code.in_roots(),
                pool: self.pool.as_deref(),
                no_pool: writable
                    .iter()
                    .flat_map(|parts| (1..=parts.len()).map(|i| tmp.join(parts[..i].join("/"))))
                    .collect(),
                root_path: tmp.clone(),
                #[cfg(feature = "fault-injection")]
                fail_after: req.fail_after_files,
            },
        );

        let t_build = Instant::now();
        let tmp_c = cstr(&tmp_name).ctx("name", &tmp)?;
        let root_dir = parent_dir.mkdir_at(&tmp_c, 0o755).ctx("mkdir", &tmp)?;
        let filled = b
            .fill(&root_dir, &tmp, &req.root, true)
            .and_then(|_| outputs::make_output_parents(&root_dir, &tmp, &writable))
            .and_then(|_| match &shared {
                Some((lease, _)) => shared_map::link(&root_dir, &tmp, lease.dirs()),
                None => Ok(()),
            })
            .and_then(|_| {
                if self.modes.root_exact {
                    Ok(())
                } else {
                    root_dir.chmod(0o755).ctx("chmod", &tmp)
                }
            });
        drop(root_dir);
        let build_us = t_build.elapsed().as_micros() as u64;
        if let Err(e) = filled {
            b.abandon_loans();
            let _ = crate::remove::remove_tree(&tmp);
            return Err(match e {
                Error::Missing { path, .. } => Error::Missing {
                    digests: tree::find_missing(&self.cache, &req.root)?,
                    path,
                },
                e => e,
            });
        }
        let mut built = b.finish();
        let at = parent_dir.as_raw_fd();
        if let Err(e) = platform::rename_noreplace_at(at, &tmp_c, at, &name_c) {
            if let Some(pool) = &self.pool {
                for l in built.loans.drain(..) {
                    pool.abandon(l);
                }
            }
            let _ = crate::remove::remove_tree(&tmp);
            return Err(match e.raw_os_error() {
                Some(libc::EEXIST) | Some(libc::ENOTEMPTY) => {
                    Error::DestinationExists(dest.clone())
                }
                _ => Error::io("rename", dest, e),
            });
        }

        let micros = t0.elapsed().as_micros() as u64;
        let mut counters = built.counters;
        if let Some((lease, m)) = &shared {
            for (k, v) in [
                ("shared_dirs_linked", lease.dirs().len() as u64),
                ("shared_dirs_declared", m.declared),
                ("shared_dirs_over_limit", m.over_limit),
            ] {
                if v > 0 {
                    *counters.extra.entry(k.into()).or_default() += v;
                }
            }
        }
        counters.stages = 1;
        counters.stage_us_total = micros;
        let estimates_due = self
            .devices
            .observe(key, built.file_us, built.tree_us)
            .then_some(key);
        tracing::debug!(
            root = %req.root,
            dest = %dest.display(),
            micros,
            plan_us,
            build_us,
            files_us = built.files_time.as_micros() as u64,
            files = built.files,
            "staged"
        );
        let staged = StagedRoot {
            root: req.root,
            dest: dest.clone(),
            working_dir,
            counters,
            micros,
            linked: built.linked,
            linked_unique: Default::default(),
            quarantine_mark,
            ledger: self.ledger.clone(),
            cache: self.cache.clone(),
            loans: built.loans,
            pool: self.pool.clone(),
            shared: shared.map(|(lease, _)| lease),
            _pin: pin,
        };
        self.ledger
            .staged(staged.root, &staged.counters, estimates_due);
        Ok(staged)
    }
}
