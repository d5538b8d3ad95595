//! A minimal executor for the asynchronous reads: runs one future to completion on the calling
//! thread, parking it while the future waits. For synchronous callers, tests and examples; an
//! application with a runtime (tokio, smol, ...) awaits the futures there instead.
//!
//! Where the thread can have its own ring ([`crate::bio::ThreadRing`]), the reads the future
//! awaits go there and the thread parks in it: a completion wakes this thread directly instead
//! of the engine's reaper, which would then wake this thread.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

/// Wakes the thread blocked in [`block_on`].
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `fut` to completion on this thread, parking while it is pending.
///
/// ```
/// assert_eq!(quire::filemap::block_on(async { 6 * 7 }), 42);
/// ```
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    if let Some(ring) = crate::bio::ThreadRing::current() {
        let waker = ring.waker();
        let mut cx = Context::from_waker(&waker);
        loop {
            if let Poll::Ready(out) = ring.enter(|| fut.as_mut().poll(&mut cx)) {
                return out;
            }
            ring.park();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = fut.as_mut().poll(&mut cx) {
            return out;
        }
        // A wake-up between the poll and here leaves the unpark token set: no sleep is lost.
        std::thread::park();
    }
}
