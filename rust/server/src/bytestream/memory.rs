//! The memory the zstd decoders of compressed uploads may hold at once (`DecoderBudget`),
//! charged per frame (`Lease`, the decoder's `zstd::DecoderMemory`).
//!
//! A frame's decoder keeps up to its window of output (`zstd`), at most
//! `zstd::MAX_WINDOW` (128 MiB), so eight hostile uploads with 128 MiB windows held 846 MB
//! (issue 23). Each decoder now asks for what its frame may hold before decoding it
//! (`zstd::frame_memory`: the window or the bytes left, whichever is smaller); the budget
//! grants it while the total stays within `DECODER_MEMORY`, which fits one frame of the
//! largest window beside many of the 2 MiB ones Bazel's default level writes. When it would
//! not fit, decoders whose stream has sent nothing for `IDLE_GRACE` are asked to give way,
//! oldest first, as many as the shortfall needs: their stream ends with ABORTED and drops its
//! decoder (the upload's temp file stays; Bazel retries ABORTED, asks QueryWriteStatus and
//! resumes). Memory counts as free only once a decoder is really gone, so the total never
//! passes the cap however late the asked stream runs. A new stream waits
//! up to `ADMIT_WAIT` for room (as Buildbarn's bounded zstd pool waits for a decoder:
//! bb-storage `pkg/zstd/bounded_pool.go`), then gets RESOURCE_EXHAUSTED, which Bazel also
//! retries (`RemoteRetrier.RETRIABLE_GRPC_ERRORS`). A decoder that ends (its stream ended, or
//! its frame did) gives its memory back.
//!
//! Locks: the budget's, then a lease's; never held across an await.

use crate::failure::Failure;
use crate::zstd::DecoderMemory;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// What all decoders of compressed uploads may hold at once: one frame of the largest window
/// (128 MiB) and 32 MiB more (a dozen frames of Bazel's 2 MiB window).
pub(crate) const DECODER_MEMORY: u64 = 160 << 20;

/// How long a stream must have sent nothing before its decoder gives way to another's.
pub(crate) const IDLE_GRACE: Duration = Duration::from_secs(5);

/// How long a new compressed stream waits for room before RESOURCE_EXHAUSTED.
pub(crate) const ADMIT_WAIT: Duration = Duration::from_secs(10);

pub(crate) struct DecoderBudget {
    cap: u64,
    grace: Duration,
    state: Mutex<BudgetState>,
    /// Signalled when memory is given back.
    freed: Notify,
}

#[derive(Default)]
struct BudgetState {
    used: u64,
    /// Leases holding memory (dead ones are pruned as the list is walked).
    holders: Vec<Weak<Cell>>,
}

#[derive(Default)]
struct Cell {
    st: Mutex<LeaseState>,
    /// Signalled when the lease was taken away (`LeaseWatch::evicted`).
    evicted: Notify,
}

#[derive(Default)]
struct LeaseState {
    bytes: u64,
    /// Since when the stream has been waiting for its next message (None: working).
    idle_since: Option<Instant>,
    evicted: bool,
    /// The last request for memory was refused (`LeaseWatch::refused`).
    refused: bool,
}

impl DecoderBudget {
    pub fn new(cap: u64, grace: Duration) -> Arc<DecoderBudget> {
        Arc::new(DecoderBudget {
            cap,
            grace,
            state: Mutex::default(),
            freed: Notify::new(),
        })
    }

    /// Bytes granted now, and to how many decoders.
    pub fn used(&self) -> (u64, usize) {
        let mut b = self.state.lock().unwrap();
        prune(&mut b);
        let n = b.holders.len();
        (b.used, n)
    }

    pub fn cap(&self) -> u64 {
        self.cap
    }

    /// A lease for one decoder (held by it) and the watch its stream keeps.
    pub fn lease(self: &Arc<Self>) -> (Lease, LeaseWatch) {
        let cell = Arc::new(Cell::default());
        let watch = LeaseWatch {
            budget: self.clone(),
            cell: cell.clone(),
        };
        (
            Lease {
                budget: self.clone(),
                cell,
            },
            watch,
        )
    }

    /// Set `cell`'s grant to `bytes`, letting idle decoders give way; false if it cannot fit.
    fn set(&self, cell: &Arc<Cell>, bytes: u64, now: Instant) -> Result<(), Failure> {
        let mut b = self.state.lock().unwrap();
        let mut c = cell.st.lock().unwrap();
        if c.evicted {
            return Err(Failure::ResourceExhausted(
                "this upload's decoder gave its memory to another upload".into(),
            ));
        }
        if bytes <= c.bytes {
            b.used -= c.bytes - bytes;
            c.bytes = bytes;
            drop(c);
            if bytes == 0 {
                forget(&mut b, cell);
            }
            drop(b);
            self.freed.notify_waiters();
            return Ok(());
        }
        let need = bytes - c.bytes;
        if b.used + need > self.cap {
            c.refused = true;
            drop(c);
            let short = b.used + need - self.cap;
            self.ask_idle_to_give_way(&mut b, cell, short, now);
            return Err(Failure::ResourceExhausted(format!(
                "zstd decoders of compressed uploads hold {} MiB of their {} MiB; this frame needs {} MiB more (retry, or upload uncompressed)",
                b.used >> 20,
                self.cap >> 20,
                need.div_ceil(1 << 20)
            )));
        }
        if c.bytes == 0 {
            b.holders.push(Arc::downgrade(cell));
        }
        b.used += need;
        c.bytes = bytes;
        c.refused = false;
        Ok(())
    }

    /// Ask the decoders idle longest (at least `grace`), other than `me`, to give way until
    /// what they hold covers `short` (counting those asked before and not gone yet).
    fn ask_idle_to_give_way(&self, b: &mut BudgetState, me: &Arc<Cell>, short: u64, now: Instant) {
        prune(b);
        let mut idle = Vec::new();
        let mut leaving = 0;
        for c in b.holders.iter().filter_map(Weak::upgrade) {
            if Arc::ptr_eq(&c, me) {
                continue;
            }
            let st = c.st.lock().unwrap();
            if st.evicted {
                leaving += st.bytes;
            } else if let Some(since) = st.idle_since {
                if now.saturating_duration_since(since) >= self.grace {
                    idle.push((since, st.bytes, c.clone()));
                }
            }
        }
        idle.sort_by_key(|(since, _, _)| *since);
        for (_, bytes, victim) in idle {
            if leaving >= short {
                break;
            }
            victim.st.lock().unwrap().evicted = true;
            // A stored permit: the stream sees it even if it is not waiting yet.
            victim.evicted.notify_one();
            leaving += bytes;
        }
    }

    /// `cell`'s decoder is gone: its memory is free.
    fn release(&self, cell: &Arc<Cell>) {
        let mut b = self.state.lock().unwrap();
        let mut c = cell.st.lock().unwrap();
        if c.bytes > 0 {
            b.used -= c.bytes;
            c.bytes = 0;
            drop(c);
            forget(&mut b, cell);
            drop(b);
            self.freed.notify_waiters();
        }
    }
}

fn prune(b: &mut BudgetState) {
    b.holders.retain(|w| w.strong_count() > 0);
}

/// `cell` holds nothing any more.
fn forget(b: &mut BudgetState, cell: &Arc<Cell>) {
    b.holders
        .retain(|w| !std::ptr::eq(w.as_ptr(), Arc::as_ptr(cell)));
}

/// One decoder's grant: dropping it (with the decoder) gives the memory back.
pub(crate) struct Lease {
    budget: Arc<DecoderBudget>,
    cell: Arc<Cell>,
}

impl DecoderMemory for Lease {
    fn hold(&mut self, bytes: u64) -> Result<(), Failure> {
        self.budget.set(&self.cell, bytes, Instant::now())
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.budget.release(&self.cell);
    }
}

/// What the stream that feeds a decoder knows of its lease.
pub(crate) struct LeaseWatch {
    budget: Arc<DecoderBudget>,
    cell: Arc<Cell>,
}

impl LeaseWatch {
    /// Before the first frame: wait up to `wait` until `bytes` fit (the decoder's own
    /// request for them then finds them granted).
    pub async fn admit(&self, bytes: u64, wait: Duration) -> Result<(), Failure> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let freed = self.budget.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match self.budget.set(&self.cell, bytes, Instant::now()) {
                Ok(()) => return Ok(()),
                Err(f) if tokio::time::Instant::now() >= deadline => return Err(f),
                Err(_) => {}
            }
            // Idle decoders become evictable with time, not only when memory is freed.
            let tick = deadline.min(tokio::time::Instant::now() + Duration::from_millis(500));
            let _ = tokio::time::timeout_at(tick, freed).await;
        }
    }

    /// The stream waits for its next message: its decoder may give way after the grace.
    pub fn idle(&self) {
        self.cell.st.lock().unwrap().idle_since = Some(Instant::now());
    }

    /// The stream has a message to decode; false if its memory was taken meanwhile.
    pub fn busy(&self) -> bool {
        let mut c = self.cell.st.lock().unwrap();
        c.idle_since = None;
        !c.evicted
    }

    /// Resolves once the decoder's memory was given to another upload.
    pub async fn evicted(&self) {
        self.cell.evicted.notified().await
    }

    /// The decoder's last request for memory was refused (nothing was decoded for it).
    pub fn refused(&self) -> bool {
        self.cell.st.lock().unwrap().refused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn grants_within_the_cap_and_gives_back_on_drop() {
        let b = DecoderBudget::new(10 * MIB, IDLE_GRACE);
        let (mut l1, _w1) = b.lease();
        let (mut l2, w2) = b.lease();
        l1.hold(6 * MIB).unwrap();
        assert_eq!(b.used(), (6 * MIB, 1));
        // Working decoders never give way: the second frame is refused.
        let e = l2.hold(5 * MIB).unwrap_err();
        assert!(matches!(e, Failure::ResourceExhausted(_)), "{e:?}");
        assert!(w2.refused());
        l2.hold(4 * MIB).unwrap();
        assert_eq!(b.used(), (10 * MIB, 2));
        l1.hold(0).unwrap(); // frame ended
        assert_eq!(b.used(), (4 * MIB, 1));
        drop(l2);
        assert_eq!(b.used(), (0, 0));
    }

    #[test]
    fn an_idle_decoder_gives_way_after_the_grace_and_counts_until_gone() {
        let b = DecoderBudget::new(10 * MIB, Duration::from_secs(5));
        let (mut l1, w1) = b.lease();
        let (mut l0, w0) = b.lease();
        let (l2, _w2) = b.lease();
        l1.hold(5 * MIB).unwrap();
        l0.hold(3 * MIB).unwrap();
        w0.idle();
        w1.idle(); // idle after l0: l0 is asked first
        let now = Instant::now();
        let evicted = |c: &Arc<Cell>| c.st.lock().unwrap().evicted;
        assert!(
            b.set(&l2.cell, 6 * MIB, now).is_err(),
            "idle for less than the grace"
        );
        assert!(!evicted(&l0.cell) && !evicted(&l1.cell));
        // 4 MiB short: l0 (3 MiB) is not enough, so l1 is asked too; memory is not free yet.
        let later = now + Duration::from_secs(6);
        assert!(b.set(&l2.cell, 6 * MIB, later).is_err());
        assert!(evicted(&l0.cell) && evicted(&l1.cell));
        assert_eq!(b.used(), (8 * MIB, 2));
        assert!(l1.hold(MIB).is_err(), "an asked decoder gets nothing more");
        drop(l0);
        assert!(
            b.set(&l2.cell, 6 * MIB, later).is_err(),
            "l1 still holds 5 MiB"
        );
        drop(l1);
        b.set(&l2.cell, 6 * MIB, later).unwrap();
        assert_eq!(b.used(), (6 * MIB, 1));
        assert!(!w1.busy() && !w0.busy(), "the asked streams learn it");
    }

    #[tokio::test]
    async fn admission_waits_for_room() {
        let b = DecoderBudget::new(10 * MIB, IDLE_GRACE);
        let (mut l1, _w1) = b.lease();
        l1.hold(8 * MIB).unwrap();
        let (_l2, w2) = b.lease();
        let e = w2.admit(4 * MIB, Duration::from_millis(50)).await;
        assert!(e.is_err());
        let waiting =
            tokio::spawn(
                async move { w2.admit(4 * MIB, Duration::from_secs(30)).await.map(|_| w2) },
            );
        tokio::task::yield_now().await;
        drop(l1);
        let w2 = waiting.await.unwrap().unwrap();
        assert!(w2.busy());
        assert_eq!(b.used(), (4 * MIB, 1));
    }
}
