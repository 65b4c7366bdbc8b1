//! Returning a lent copy after the action: proven untouched (`Record::verify`) and renamed back
//! into the pool under a fresh name, its top recorded again; anything else is discarded,
//! counted with the reason, and left in the work dir for the janitor to remove. The parent in
//! the root is read-only (0o555) input directory: a process that needs write permission to
//! move a directory out of it (and on the directory itself, whose `..` changes) makes both
//! writable first; the root is being removed anyway, and the copy is put back to 0o555 and
//! recorded after the move.

use super::{discard, forget, Discard, Loan, Pool};
use crate::cas::Cache;
use crate::platform::{self, cstr, Dir};
use std::os::fd::AsRawFd;
use std::path::Path;

impl Pool {
    /// Take `loan` back from the root at `root` (the action has ended). Err: discarded, why.
    pub fn recycle(&self, cache: &Cache, root: &Path, loan: Loan) -> Result<(), Discard> {
        let Loan { rel, mut copy } = loan;
        let top = root.join(&rel);
        let fail = |copy: &super::Copy, reason: &'static str, path: &Path| {
            forget(&mut self.state.lock().unwrap(), copy);
            discard::count(&self.ledger, reason);
            tracing::info!(digest = %copy.digest, path = %path.display(), reason, "a lent subtree copy came back changed (or could not be returned); discarding it");
            Discard {
                reason,
                path: path.to_path_buf(),
            }
        };
        // Read before the proof: a quarantine during it moves the stamp past this one.
        let now = cache.quarantine_stamp();
        let stamp_holds = copy.stamp_holds(now);
        if let Err((reason, path)) = copy.record.verify(cache, &top, !stamp_holds) {
            return Err(fail(&copy, reason, &path));
        }
        copy.stamp = now;
        if copy.links_a_quarantined_inode(cache) {
            return Err(fail(&copy, "quarantined", &top));
        }
        let name = self.next_name(&copy.digest);
        let r = (|| -> std::io::Result<()> {
            let cname = cstr(&name)?;
            let (parent, last) = match (top.parent(), top.file_name()) {
                (Some(p), Some(l)) => (p, l),
                _ => return Err(std::io::Error::from_raw_os_error(libc::EINVAL)),
            };
            let pd = Dir::open(parent)?;
            let last = cstr(last)?;
            if self.chmod_to_move {
                pd.chmod(0o755)?;
                pd.chmod_at(&last, 0o755)?;
            }
            platform::rename_noreplace_at(pd.as_raw_fd(), &last, self.fd.as_raw_fd(), &cname)?;
            if self.chmod_to_move {
                self.fd.chmod_at(&cname, 0o555)?;
            }
            Ok(())
        })();
        if let Err(e) = r {
            tracing::warn!(path = %top.display(), error = %e, "cannot return a lent copy to the pool");
            if self.dir.join(&name).exists() {
                let _ = crate::remove::remove_tree(&self.dir.join(&name));
            }
            return Err(fail(&copy, "return-rename", &top));
        }
        let back = self.dir.join(&name);
        if let Err(e) = copy.record.retop(&back) {
            tracing::warn!(path = %back.display(), error = %e, "cannot record a returned copy");
            let _ = crate::remove::remove_tree(&back);
            return Err(fail(&copy, "return-record", &back));
        }
        self.ledger.add(|c| c.pool_recycled += 1);
        let cname = cstr(&name).expect("a digest name has no NUL");
        let mut s = self.state.lock().unwrap();
        s.ready.entry(copy.digest).or_default().push((cname, copy));
        Ok(())
    }

    /// A lent copy that will not come back (its root was removed with it): forgotten, counted.
    pub fn abandon(&self, loan: Loan) {
        forget(&mut self.state.lock().unwrap(), &loan.copy);
        discard::count(&self.ledger, "not-returned");
    }
}
