//! The read side's circuit breaker: after `TRIP` consecutive failures (an error, a lie), or
//! at once on a stall (no answer within the timeout: a stopped or overloaded server costs
//! every waiting action that much, so a second one is not asked to find out), lookups stop
//! asking the upstream for `OPEN_FOR`, then one probe is let through; a success closes it. The first failure after a healthy period is the one warning the user
//! sees (the caller logs it, naming the upstream and the error).

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(crate) const TRIP: u32 = 3;
pub(crate) const OPEN_FOR: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Inner {
    consecutive: u32,
    open_until: Option<Instant>,
    /// A probe is out while the breaker is half open.
    probing: bool,
}

#[derive(Default)]
pub(crate) struct Breaker {
    inner: Mutex<Inner>,
}

/// What one failure did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Failed {
    /// The first failure after a healthy period: warn once.
    pub first: bool,
    /// This failure opened the breaker.
    pub opened: bool,
}

impl Breaker {
    /// Whether a lookup may ask the upstream now.
    pub fn allow(&self) -> bool {
        self.allow_at(Instant::now())
    }

    fn allow_at(&self, now: Instant) -> bool {
        let mut i = self.inner.lock().unwrap();
        match i.open_until {
            None => true,
            Some(t) if now < t => false,
            Some(_) if i.probing => false,
            Some(_) => {
                i.probing = true;
                true
            }
        }
    }

    pub fn success(&self) {
        let mut i = self.inner.lock().unwrap();
        *i = Inner::default();
    }

    pub fn failure(&self) -> Failed {
        self.failure_at(Instant::now(), false)
    }

    /// No answer within the timeout: opens the breaker at once.
    pub fn stall(&self) -> Failed {
        self.failure_at(Instant::now(), true)
    }

    fn failure_at(&self, now: Instant, stalled: bool) -> Failed {
        let mut i = self.inner.lock().unwrap();
        i.consecutive += 1;
        let first = i.consecutive == 1;
        let probe_failed = i.probing;
        i.probing = false;
        let opened = probe_failed || (i.open_until.is_none() && (stalled || i.consecutive >= TRIP));
        if opened {
            i.open_until = Some(now + OPEN_FOR);
        }
        Failed { first, opened }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_three_then_probes_once() {
        let b = Breaker::default();
        let t0 = Instant::now();
        assert!(b.allow_at(t0));
        assert_eq!(
            b.failure_at(t0, false),
            Failed {
                first: true,
                opened: false
            }
        );
        assert!(!b.failure_at(t0, false).first);
        assert!(b.failure_at(t0, false).opened);
        assert!(!b.allow_at(t0 + Duration::from_secs(29)));
        let later = t0 + OPEN_FOR + Duration::from_millis(1);
        assert!(b.allow_at(later), "one probe");
        assert!(!b.allow_at(later), "only one");
        assert!(b.failure_at(later, false).opened, "a failed probe reopens");
        assert!(!b.allow_at(later));
        let again = later + OPEN_FOR + Duration::from_millis(1);
        assert!(b.allow_at(again));
        b.success();
        assert!(b.allow_at(again) && b.allow_at(again));
        assert!(
            b.failure_at(again, false).first,
            "healthy again: the next failure warns"
        );
    }

    #[test]
    fn a_stall_opens_at_once_and_warns_once() {
        let b = Breaker::default();
        let t0 = Instant::now();
        assert_eq!(
            b.failure_at(t0, true),
            Failed {
                first: true,
                opened: true
            }
        );
        assert!(!b.allow_at(t0 + Duration::from_secs(1)));
        assert!(
            !b.failure_at(t0, true).opened,
            "a second stall in flight does not reopen"
        );
    }
}
