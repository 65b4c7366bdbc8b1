//! How busy the execution service is, asked by what must wait for it (shutdown's drain,
//! idle-time eviction, the ledger's flush timer) without importing the service.

/// How busy a service is.
pub(crate) trait Activity: Send + Sync {
    /// Actions accepted and not answered yet.
    fn unfinished(&self) -> usize;
    /// Cleanups the service queued and has not done yet (work dirs waiting for removal).
    fn cleanups_pending(&self) -> usize;
}
