//! Taking a ready copy into a root being built: one no-replace rename from the pool into the
//! root's directory (made writable around the move where the process needs that to move a
//! directory to another parent), then the copy's top recorded again (the rename moved its
//! ctime). A copy that is not settled yet (`Record::settled`), or whose Mach-O code links are
//! younger than the minimum age to run (`Copy::lendable`), stays in the pool; one whose
//! cache inodes were quarantined since it was built (by this process, or by another one: the
//! quarantine count moved and a lookup finds the inode gone) is discarded, never lent.

use super::{discard, forget, Copy, Pool};
use crate::cas::Cache;
use crate::digest::Digest;
use crate::platform::{self, Dir};
use std::ffi::CStr;
use std::os::fd::AsRawFd;
use std::path::Path;

impl Pool {
    /// Move a ready copy of `d` to `name` in `dir` (at `p`). None: no copy to lend (a miss).
    pub(crate) fn take(
        &self,
        cache: &Cache,
        d: &Digest,
        dir: &Dir,
        name: &CStr,
        p: &Path,
        min_link_age: std::time::Duration,
    ) -> Option<Copy> {
        let (src, mut copy) = loop {
            let mut s = self.state.lock().unwrap();
            let list = s.ready.get_mut(d)?;
            let i = list.iter().position(|(_, c)| c.lendable(min_link_age))?;
            let (src, copy) = list.swap_remove(i);
            if list.is_empty() {
                s.ready.remove(d);
            }
            if copy.links_a_quarantined_inode(cache) {
                forget(&mut s, &copy);
                drop(s);
                discard::count(&self.ledger, "quarantined");
                discard::remove_named(&self.dir, &src);
                continue;
            }
            break (src, copy);
        };
        // Another process (`clonestage verify`) may have quarantined one of its inodes: then
        // each is looked up before the copy is lent.
        let now = cache.quarantine_stamp();
        if !copy.stamp_holds(now) {
            if !copy.record.cache_inodes_intact(cache) {
                self.drop_copy(&src, copy, "quarantined");
                return None;
            }
            copy.stamp = now;
        }
        if self.chmod_to_move {
            if let Err(e) = self.fd.chmod_at(&src, 0o755) {
                tracing::warn!(path = %self.dir.join(src.to_string_lossy().as_ref()).display(), error = %e, "cannot make a pooled copy movable; discarding it");
                self.drop_copy(&src, copy, "chmod");
                return None;
            }
        }
        match platform::rename_noreplace_at(self.fd.as_raw_fd(), &src, dir.as_raw_fd(), name) {
            Ok(()) => {}
            Err(e) => {
                tracing::warn!(from = %self.dir.join(src.to_string_lossy().as_ref()).display(), to = %p.display(), error = %e, "cannot take a pooled copy (rename); discarding it and staging per file");
                self.drop_copy(&src, copy, "take-rename");
                return None;
            }
        }
        if self.chmod_to_move {
            if let Err(e) = dir.chmod_at(name, 0o555) {
                // Left 0o755: the recycle check sees the mode and discards it.
                tracing::warn!(path = %p.display(), error = %e, "cannot make a taken copy read-only again");
            }
        }
        if let Err(e) = copy.record.retop(p) {
            // The check after the action then fails on the top's ctime: discarded, not lent.
            tracing::warn!(path = %p.display(), error = %e, "cannot record a taken copy's top");
        }
        Some(copy)
    }

    /// A ready copy leaves the pool without being lent: counted and removed.
    pub(super) fn drop_copy(&self, name: &CStr, copy: Copy, why: &'static str) {
        forget(&mut self.state.lock().unwrap(), &copy);
        discard::count(&self.ledger, why);
        discard::remove_named(&self.dir, name);
    }
}
