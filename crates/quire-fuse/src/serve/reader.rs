//! Where deferred READs wait ([`super::Serve::read_deferred`]): one thread that polls their
//! futures on its own io_uring (`quire::bio::ThreadRing`) and sends each reply when its future
//! is done.
//!
//! A serving thread hands the future over without polling it (a deferred read is a miss: the
//! file system gives none for a range already cached), so the read is submitted from this
//! thread, to its ring; the completion then wakes this thread directly, which runs the read's
//! end, polls the future and replies — one thread switch between the device and the reply. Where
//! the thread cannot have a ring (io_uring refused), its misses go through the cache's engine
//! and it parks as any thread does.
//!
//! | piece | who | how |
//! |---|---|---|
//! | `incoming` | serving threads push a job; the reader takes them all | a mutex; the pusher then wakes the reader |
//! | `ready` | a job's waker pushes its slot; the reader takes them all | a mutex; the waker then wakes the reader |
//! | slots | the reader only | a job per slot until its reply is sent; freed slots are reused |
//! | `stop` | set when the [`super::Fuse`] goes | the reader drops what it holds (a reply dropped unsent answers an error) and ends |

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use fuser::ReplyData;
use quire::bio::{ThreadRing, Unparker};

use super::{Deferred, Res};

/// How the reader is woken.
enum Wakeup {
    Ring(Unparker),
    Thread(std::thread::Thread),
}

impl Wakeup {
    fn wake(&self) {
        match self {
            Wakeup::Ring(u) => u.unpark(),
            Wakeup::Thread(t) => t.unpark(),
        }
    }
}

/// What to do with a deferred read's result (send the reply).
pub(super) type Then = Box<dyn FnOnce(Res<Vec<u8>>) + Send>;

struct Shared {
    incoming: Mutex<Vec<(Deferred, Then)>>,
    ready: Mutex<Vec<usize>>,
    stop: AtomicBool,
    wakeup: Wakeup,
}

/// Queues its slot as ready and wakes the reader.
struct SlotWaker {
    slot: usize,
    shared: Arc<Shared>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.shared.ready.lock().unwrap().push(self.slot);
        self.shared.wakeup.wake();
    }
}

/// The reader thread's handle (see the [module documentation](self)).
pub(super) struct Reader {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Reader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reader").finish_non_exhaustive()
    }
}

impl Reader {
    /// Starts the thread; `None` if it cannot start.
    pub(super) fn start() -> Option<Reader> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("quire-fuse-read".into())
            .spawn(move || {
                let ring = ThreadRing::current();
                let wakeup = match &ring {
                    Some(r) => Wakeup::Ring(r.unparker()),
                    None => Wakeup::Thread(std::thread::current()),
                };
                let shared = Arc::new(Shared {
                    incoming: Mutex::new(Vec::new()),
                    ready: Mutex::new(Vec::new()),
                    stop: AtomicBool::new(false),
                    wakeup,
                });
                if tx.send(shared.clone()).is_ok() {
                    run(&shared, ring.as_ref());
                }
            })
            .ok()?;
        Some(Reader {
            shared: rx.recv().ok()?,
        })
    }

    /// Runs `then` with `fut`'s result once it is done (on the reader thread).
    pub(super) fn defer(&self, fut: Deferred, then: Then) {
        self.shared.incoming.lock().unwrap().push((fut, then));
        self.shared.wakeup.wake();
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wakeup.wake();
    }
}

/// Sends a deferred READ's answer.
pub(super) fn answer(reply: ReplyData, r: Res<Vec<u8>>) {
    match r {
        Ok(data) => reply.data(&data),
        Err(e) => reply.error(e),
    }
}

/// The reader's loop: takes new jobs, polls the woken ones (inside the ring, so their misses go
/// there), reaps, and parks when nothing is ready.
fn run(shared: &Arc<Shared>, ring: Option<&ThreadRing>) {
    type Job = (Pin<Box<dyn Future<Output = Res<Vec<u8>>> + Send>>, Then);
    let mut slots: Vec<Option<(Job, Waker)>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut now: Vec<usize> = Vec::new();
    while !shared.stop.load(Ordering::Acquire) {
        for job in std::mem::take(&mut *shared.incoming.lock().unwrap()) {
            let slot = free.pop().unwrap_or_else(|| {
                slots.push(None);
                slots.len() - 1
            });
            let waker = Waker::from(Arc::new(SlotWaker {
                slot,
                shared: shared.clone(),
            }));
            slots[slot] = Some((job, waker));
            now.push(slot);
        }
        now.append(&mut shared.ready.lock().unwrap());
        if now.is_empty() {
            match ring {
                Some(r) => r.park(),
                None => std::thread::park(),
            }
            continue;
        }
        for slot in now.drain(..) {
            let Some(((fut, _), waker)) = slots.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            let mut cx = Context::from_waker(waker);
            let polled = match ring {
                Some(r) => r.enter(|| fut.as_mut().poll(&mut cx)),
                None => fut.as_mut().poll(&mut cx),
            };
            if let Poll::Ready(r) = polled {
                if let Some(((_, then), _)) = slots[slot].take() {
                    then(r);
                }
                free.push(slot);
            }
        }
        if let Some(r) = ring {
            r.reap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quire::filemap::{CacheConfig, PageCache};
    use quire::store::{FileStore, IoMode};
    use std::sync::mpsc;
    use std::time::Duration;

    /// 200 deferred reads at once of a real file through a cache 2× smaller (room for all 200
    /// misses in flight): every answer has the
    /// file's bytes, and where the reader has a ring the misses went to it.
    #[test]
    fn deferred_reads_are_answered_with_the_files_bytes() {
        const PAGE: usize = 4096;
        let path = std::env::temp_dir().join(format!("quire-fuse-reader-{}", std::process::id()));
        let data: Vec<u8> = (0..2048 * PAGE).map(|i| (i * 31 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let mut cfg = CacheConfig::new(1024 * PAGE);
        cfg.readahead_max = 0;
        cfg.max_folio_order = 0;
        let cache = PageCache::new(cfg).unwrap();
        let f = Arc::new(
            cache
                .open(FileStore::open(&path, IoMode::PreferDirect).unwrap())
                .unwrap(),
        );
        let reader = Reader::start().expect("the reader thread starts");
        let (tx, rx) = mpsc::channel();
        for i in 0..200usize {
            let page = (i * 7919) % 2048;
            let f = f.clone();
            let fut: Deferred = Box::pin(async move {
                let mut buf = vec![0u8; PAGE];
                let n = f
                    .read_at_async((page * PAGE) as u64, &mut buf)
                    .await
                    .map_err(|_| fuser::Errno::EIO)?;
                buf.truncate(n);
                Ok(buf)
            });
            let tx = tx.clone();
            reader.defer(fut, Box::new(move |r| tx.send((page, r)).unwrap()));
        }
        for _ in 0..200 {
            let (page, r) = rx.recv_timeout(Duration::from_secs(30)).expect("an answer");
            assert!(
                r.unwrap() == data[page * PAGE..(page + 1) * PAGE],
                "page {page}"
            );
        }
        let io = cache.stats().io;
        if cache.stats().io_engine.kind == quire::bio::IoEngineKind::IoUring
            && ThreadRing::current().is_some()
        {
            assert!(io.local > 0, "the reader's misses on its ring: {io:?}");
        }
        drop(reader);
        drop(f);
        let _ = std::fs::remove_file(&path);
    }
}
