//! Running a closure on N threads for a fixed time, and what it cost: wall time, CPU time and
//! context switches (getrusage), and quire's event counters.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use quire::stats::Snapshot;

/// What one measured run did.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// Operations completed by all threads together.
    pub ops: u64,
    /// Wall-clock time from the common start to the last thread's stop.
    pub elapsed: Duration,
    /// User plus system CPU time of the whole process over the run.
    pub cpu: Duration,
    /// Voluntary plus involuntary context switches of the whole process over the run.
    pub ctx_switches: u64,
    /// quire's counters over the run.
    pub events: Snapshot,
}

impl Measurement {
    /// Operations per wall-clock second.
    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64()
    }

    /// Operations per CPU second of the process.
    pub fn ops_per_cpu_s(&self) -> f64 {
        self.ops as f64 / self.cpu.as_secs_f64().max(1e-9)
    }

    /// Events of one kind per operation.
    pub fn per_op(&self, e: quire::stats::Event) -> f64 {
        self.events.get(e) as f64 / (self.ops.max(1)) as f64
    }
}

struct Usage {
    cpu: Duration,
    ctx: u64,
}

fn usage() -> Usage {
    // SAFETY: getrusage writes a plain struct that we own; all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer to a `rusage` is always a valid call.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc != 0 {
        return Usage {
            cpu: Duration::ZERO,
            ctx: 0,
        };
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Usage {
        cpu: tv(ru.ru_utime) + tv(ru.ru_stime),
        ctx: (ru.ru_nvcsw + ru.ru_nivcsw) as u64,
    }
}

/// Runs `work(thread_index, stop)` on `threads` threads that start together; each returns how
/// many operations it completed once `stop` turns true, `duration` after the start.
pub fn measure<F>(threads: usize, duration: Duration, work: F) -> Measurement
where
    F: Fn(usize, &AtomicBool) -> u64 + Sync,
{
    let stop = AtomicBool::new(false);
    let barrier = Barrier::new(threads + 1);
    let mut out = None;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let (work, stop, barrier) = (&work, &stop, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    work(i, stop)
                })
            })
            .collect();
        let u0 = usage();
        let e0 = Snapshot::take();
        let t0 = Instant::now();
        barrier.wait();
        std::thread::sleep(duration);
        stop.store(true, Ordering::Relaxed);
        let ops: u64 = handles
            .into_iter()
            .map(|h| h.join().expect("benchmark thread panicked"))
            .sum();
        let elapsed = t0.elapsed();
        let events = Snapshot::take().since(&e0);
        let u1 = usage();
        out = Some(Measurement {
            ops,
            elapsed,
            cpu: u1.cpu.saturating_sub(u0.cpu),
            ctx_switches: u1.ctx.saturating_sub(u0.ctx),
            events,
        });
    });
    out.expect("scope ran")
}

/// A small, fast random number generator for benchmark threads (xorshift64*).
pub struct Rng(u64);

impl Rng {
    /// A generator seeded from `seed` (any value).
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A random number below `n` (n > 0).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() >> 32) * n) >> 32
    }
}
