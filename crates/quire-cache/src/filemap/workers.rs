//! The cache's flusher thread (write-back). The I/O threads are the engine's ([`crate::bio`]).
//!
//! The thread holds only the shared state and a weak reference to the cache, so the cache goes
//! away when its last user does; its drop tells the thread to stop (it does not join it, since
//! it may be running on it — a write-back can hold the last reference).

use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use super::{writeback, Cache, CacheConfig};

#[derive(Default)]
struct State {
    stop: bool,
    kicked: bool,
    /// Reclaim met dirty folios at the inactive tail: the next pass writes back every file.
    for_reclaim: bool,
    /// Flusher passes completed.
    passes: u64,
}

#[derive(Default)]
struct Shared {
    state: Mutex<State>,
    flush: Condvar,
    pass_done: Condvar,
}

pub(crate) struct Workers {
    shared: Arc<Shared>,
}

impl Workers {
    /// Shared state with no thread yet; see [`Workers::spawn`].
    pub(crate) fn new() -> Workers {
        Workers {
            shared: Arc::new(Shared::default()),
        }
    }

    /// Starts the flusher for `cache`.
    pub(crate) fn spawn(&self, cache: Weak<Cache>, config: &CacheConfig) -> std::io::Result<()> {
        let shared = self.shared.clone();
        let interval = config.flush_interval;
        std::thread::Builder::new()
            .name("quire-flush".into())
            .spawn(move || flusher(cache, shared, interval))?;
        Ok(())
    }

    /// Wakes the flusher.
    pub(crate) fn kick_flusher(&self) {
        let mut st = self.shared.state.lock().unwrap();
        if !st.kicked {
            st.kicked = true;
            drop(st);
            self.shared.flush.notify_one();
        }
    }

    /// Wakes the flusher to write back every file's dirty data: reclaim met dirty folios it
    /// cannot evict (the kernel's `wakeup_flusher_threads(WB_REASON_VMSCAN)`).
    pub(crate) fn kick_for_reclaim(&self) {
        let mut st = self.shared.state.lock().unwrap();
        st.for_reclaim = true;
        if !st.kicked {
            st.kicked = true;
            drop(st);
            self.shared.flush.notify_one();
        }
    }

    /// Waits until `ok()` holds or the flusher has completed two passes since the call (so a
    /// writer is paced by write-back but never waits forever, even when write-back fails).
    pub(crate) fn throttle(&self, ok: impl Fn() -> bool) {
        let mut st = self.shared.state.lock().unwrap();
        let until = st.passes + 2;
        while !ok() && st.passes < until && !st.stop {
            st.kicked = true;
            self.shared.flush.notify_one();
            st = self
                .shared
                .pass_done
                .wait_timeout(st, Duration::from_millis(50))
                .unwrap()
                .0;
        }
    }

    /// Tells the flusher to stop.
    pub(crate) fn stop(&self) {
        self.shared.state.lock().unwrap().stop = true;
        self.shared.flush.notify_all();
        self.shared.pass_done.notify_all();
    }
}

fn flusher(cache: Weak<Cache>, shared: Arc<Shared>, interval: Duration) {
    loop {
        let for_reclaim = {
            let mut st = shared.state.lock().unwrap();
            if !st.kicked && !st.stop {
                st = shared.flush.wait_timeout(st, interval).unwrap().0;
            }
            if st.stop {
                return;
            }
            st.kicked = false;
            std::mem::take(&mut st.for_reclaim)
        };
        let Some(cache) = cache.upgrade() else {
            // Gone (its drop also sets `stop`), or not finished being built yet.
            if shared.state.lock().unwrap().stop {
                return;
            }
            continue;
        };
        // A few passes in a row while they make progress above the threshold.
        for pass in 0..8 {
            let again = writeback::flush_pass(&cache, for_reclaim && pass == 0);
            shared.state.lock().unwrap().passes += 1;
            shared.pass_done.notify_all();
            if !again {
                break;
            }
        }
    }
}
