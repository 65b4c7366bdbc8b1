//! When each blob was last used, read from the access log (`cas::access_log`): the logged
//! roots are walked newest first, so each digest is walked once and gets the time of the
//! newest root that reaches it.

use crate::cas::Cache;
use crate::digest::Digest;
use crate::tree;
use std::collections::{HashMap, HashSet};

pub(super) struct LastUse {
    /// Each reachable digest's last use, in unix seconds.
    by_digest: HashMap<Digest, u64>,
    /// Each logged root's latest time.
    latest_root: HashMap<Digest, u64>,
}

impl LastUse {
    pub(super) fn read(cache: &Cache) -> LastUse {
        let mut roots = cache.accesses();
        roots.sort_by_key(|r| std::cmp::Reverse(r.0));
        let mut by_digest: HashMap<Digest, u64> = HashMap::new();
        let mut latest_root: HashMap<Digest, u64> = HashMap::new();
        let mut seen = HashSet::new();
        for (t, r) in &roots {
            latest_root.entry(*r).or_insert(*t);
            tree::reachable(cache, r, &mut seen, &mut |d| {
                by_digest.entry(d).or_insert(*t);
            });
        }
        LastUse {
            by_digest,
            latest_root,
        }
    }

    /// When `d` was last used, if a logged root reaches it.
    pub(super) fn of(&self, d: &Digest) -> Option<u64> {
        self.by_digest.get(d).copied()
    }

    /// The log compacted: the latest time of each root still stored, oldest first.
    pub(super) fn compacted(&self, cache: &Cache) -> Vec<(u64, Digest)> {
        let mut kept: Vec<(u64, Digest)> = self
            .latest_root
            .iter()
            .filter(|(d, _)| cache.contains(d))
            .map(|(d, t)| (*t, *d))
            .collect();
        kept.sort();
        kept
    }
}
