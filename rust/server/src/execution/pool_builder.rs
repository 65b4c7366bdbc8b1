//! The pool builder: while fewer actions run than the server's `--jobs` limit and the server
//! is not draining, the janitor thread (`janitor`, when nothing else is due) asks it to build
//! one ready copy of a hot input subtree the engine's pool wants (`Stager::build_pooled`,
//! docs/design/engine.md). It holds the server's state weakly: a builder outliving the server
//! builds nothing.

use crate::state::State;
use std::sync::{Arc, Weak};

pub(crate) struct PoolBuilder {
    state: Weak<State>,
    /// The `--jobs` limit: at that many running actions, no core is spare for building.
    jobs: usize,
}

impl PoolBuilder {
    pub fn new(state: &Arc<State>, jobs: usize) -> PoolBuilder {
        PoolBuilder {
            state: Arc::downgrade(state),
            jobs: jobs.max(1),
        }
    }

    /// Build one pooled copy if one is wanted and `running` actions leave room; true if it
    /// did (the janitor then asks again at once, else it waits).
    pub fn build_one(&self, running: usize) -> bool {
        let Some(state) = self.state.upgrade() else {
            return false;
        };
        running < self.jobs
            && !state.is_draining()
            && matches!(state.stager.build_pooled(), Ok(Some(_)))
    }
}
