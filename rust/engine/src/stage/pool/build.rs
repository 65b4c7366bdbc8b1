//! Building one ready copy ahead of time, for the digest that has waited longest: filled like
//! any root (`fill::Builder`, the device's per-file method, the permission contract: files
//! 0o444/0o555, directories 0o555) under a temporary name in the pool directory, renamed to
//! its final name without replacing, recorded (`identity::Record`), and pinned. The caller
//! (the server, while it is idle or below its job limit) decides when.

use super::identity::Record;
use super::{Copy, Pool};
use crate::digest::Digest;
use crate::error::{IoContext, Result};
use crate::platform::{self, cstr};
use crate::stage::{fill, plan, Stager};
use std::os::fd::AsRawFd;

impl Stager {
    /// Build one copy for the pool if a digest waits for one and the bounds leave room.
    /// Ok(Some(digest)): built; Ok(None): nothing to do (no pool, nothing wanted, no room).
    pub fn build_pooled(&self) -> Result<Option<Digest>> {
        let Some(pool) = self.pool.as_deref() else {
            return Ok(None);
        };
        let Some(d) = pool.next_wanted() else {
            return Ok(None);
        };
        let r = self.build_copy(pool, &d);
        if let Err(e) = &r {
            tracing::warn!(digest = %d, error = %e, "cannot build a pooled copy");
        }
        r.map(|built| built.then_some(d))
    }

    /// Ok(false): no room for it (nothing built).
    fn build_copy(&self, pool: &Pool, d: &Digest) -> Result<bool> {
        let pin = self.cache.pin(d)?;
        let mark = self.cache.quarantine_mark();
        let stamp = self.cache.quarantine_stamp();
        let plan = plan::Plan::load(
            &self.cache,
            &self.memo,
            d,
            crate::tree::SymlinkPolicy::default(),
            &self.limits,
        )?;
        let facts = plan::Source::facts(&plan, d, &pool.dir)?;
        // An upper bound before building (hardlinked files are not the copy's own inodes).
        let estimate = 1 + facts.dirs + facts.entries;
        if !pool.reserve(d, estimate) {
            return Ok(false);
        }
        let r = self.fill_copy(pool, d, &plan, (mark, stamp), pin, estimate);
        if r.is_err() {
            pool.unreserve(d, estimate);
        }
        r.map(|()| true)
    }

    fn fill_copy(
        &self,
        pool: &Pool,
        d: &Digest,
        plan: &plan::Plan,
        (mark, stamp): (usize, Option<crate::cas::QuarantineStamp>),
        pin: crate::cas::PinGuard,
        estimate: u64,
    ) -> Result<()> {
        let key =
            super::super::device::Devices::key_of(&self.cache, &pool.fd).ctx("fstat", &pool.dir)?;
        let prof = self.devices.get(&self.cache, key, &pool.dir);
        let mut b = fill::Builder::new(
            plan,
            fill::Setup {
                cache: &self.cache,
                devices: &self.devices,
                seen: &self.seen,
                key,
                method: prof.file_method,
                tree_clone: None,
                costs: (prof.file_us, prof.tree_clone_us),
                modes: self.modes,
                code: self.code,
                // Made ahead: by the time a copy is lent its links are old enough to run.
                code_mode: self.code.in_pool(),
                pool: None,
                no_pool: Default::default(),
                root_path: pool.dir.clone(),
                #[cfg(feature = "fault-injection")]
                fail_after: None,
            },
        );
        let seq = pool.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp_name = format!(".b-{seq}");
        let tmp = pool.dir.join(&tmp_name);
        let tmp_c = cstr(&tmp_name).ctx("name", &tmp)?;
        let name = pool.next_name(d);
        let final_path = pool.dir.join(&name);
        let name_c = cstr(&name).ctx("name", &final_path)?;
        let r = (|| -> Result<Record> {
            let top = pool.fd.mkdir_at(&tmp_c, 0o755).ctx("mkdir", &tmp)?;
            b.fill(&top, &tmp, d, false)?;
            top.chmod(0o555).ctx("chmod", &tmp)?;
            drop(top);
            let at = pool.fd.as_raw_fd();
            platform::rename_noreplace_at(at, &tmp_c, at, &name_c).ctx("rename", &final_path)?;
            Record::take(&self.cache, plan, d, &final_path)
        })();
        let record = match r {
            Ok(rec) => rec,
            Err(e) => {
                let _ = crate::remove::remove_tree(&tmp);
                let _ = crate::remove::remove_tree(&final_path);
                return Err(e);
            }
        };
        let built = b.finish();
        let code_links = built.counters.code_linked;
        let mut linked = built.linked;
        linked.sort_unstable();
        linked.dedup();
        self.ledger.add(|c| c.pool_built += 1);
        pool.add_ready(
            name_c,
            Copy {
                digest: *d,
                record,
                mark,
                stamp,
                linked,
                code_links,
                built: std::time::Instant::now(),
                _pin: pin,
            },
            estimate,
        );
        tracing::debug!(digest = %d, path = %final_path.display(), files = built.files, "built a pooled copy");
        Ok(())
    }
}
