//! Who may use one shared directory right now: any number of actions (leases) at once, or one
//! clearer alone. A clearer that must clear (a recovery) closes the gate, which holds new
//! leases back, and waits for the running ones to end; eviction only clears a gate nobody
//! holds (`try_close`), so it never waits and never disturbs a running action.

use std::sync::{Condvar, Mutex};

#[derive(Default)]
pub(super) struct Gate {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    leases: usize,
    closed: bool,
}

impl Gate {
    /// A lease: waits while the directory is being cleared.
    pub fn enter(&self) {
        let mut s = self.state.lock().unwrap();
        while s.closed {
            s = self.changed.wait(s).unwrap();
        }
        s.leases += 1;
    }

    pub fn leave(&self) {
        let mut s = self.state.lock().unwrap();
        s.leases -= 1;
        drop(s);
        self.changed.notify_all();
    }

    /// Close it for a clear: waits for another clear to finish, then for every lease to end.
    pub fn close_wait(&self) {
        let mut s = self.state.lock().unwrap();
        while s.closed {
            s = self.changed.wait(s).unwrap();
        }
        s.closed = true;
        while s.leases > 0 {
            s = self.changed.wait(s).unwrap();
        }
    }

    /// Close it only if nobody holds or clears it now.
    pub fn try_close(&self) -> bool {
        let mut s = self.state.lock().unwrap();
        if s.closed || s.leases > 0 {
            return false;
        }
        s.closed = true;
        true
    }

    pub fn open(&self) {
        self.state.lock().unwrap().closed = false;
        self.changed.notify_all();
    }

    #[cfg(test)]
    pub fn leases(&self) -> usize {
        self.state.lock().unwrap().leases
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_clear_waits_for_leases_and_holds_new_ones_back() {
        let g = Arc::new(Gate::default());
        g.enter();
        assert!(!g.try_close(), "eviction must not close a held gate");
        let g2 = g.clone();
        let clearer = std::thread::spawn(move || {
            g2.close_wait();
            let held = g2.leases();
            g2.open();
            held
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!clearer.is_finished(), "the clear ran under a lease");
        g.leave();
        assert_eq!(clearer.join().unwrap(), 0);
        assert!(g.try_close());
        let g3 = g.clone();
        let lessee = std::thread::spawn(move || g3.enter());
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !lessee.is_finished(),
            "a lease got in while the gate was closed"
        );
        g.open();
        lessee.join().unwrap();
        assert_eq!(g.leases(), 1);
    }
}
