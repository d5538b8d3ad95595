//! The frame pool's hardware dirty bit: which frames were written since their bit was last
//! cleared, as the MMU recorded it.
//!
//! In the kernel a mapped page's dirty state can sit in hardware — the pte's dirty bit, or on
//! s390 the physical page's storage key — until the reverse map transfers it to the folio.
//! quire's frame pool is one mapping of the process, so the MMU already records writes to every
//! frame; this module reads that record. It is what a mapping of a frame (a space's pte) does
//! not track in software: whoever writes through a writable mapping just writes, and the
//! reverse map asks here before it unmaps or writes the folio back.
//!
//! # The hardware kind (Linux ≥ 6.7)
//!
//! - The pool is registered with a userfaultfd in write-protect mode with
//!   `UFFD_FEATURE_WP_ASYNC`: no fault is ever delivered to us. A write to a write-protected
//!   frame — by this process in user mode, or by the kernel on its behalf (a `read(2)` into the
//!   frame) — is resolved by the kernel itself, which drops the protection. A frame is
//!   *written* exactly when it is not write-protected.
//! - [`DirtyBits::test_and_clear`] asks the `PAGEMAP_SCAN` ioctl of `/proc/self/pagemap` for
//!   the written frames of a range (`PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC`, category
//!   `PAGE_IS_WRITTEN`), which write-protects each frame it reports in the same walk: a write
//!   racing with the test either lands before the walk reaches its pte (reported now) or faults
//!   on the new protection (reported next time). It costs a system call and a page-table walk,
//!   a real test like the storage-key instructions the kernel avoids where it can.
//! - [`DirtyBits::clear`] write-protects a range without asking (`UFFDIO_WRITEPROTECT`).
//!
//! Registering costs nothing per frame: a frame nobody protected stays writable at full speed.
//! So a user makes a `DirtyBits` when it first maps frames (the mapping layer, `rmap`, is to do
//! so), and the page cache's own writes into frames (reads from the store, `write_at`) fault
//! only once per frame after the frame was last protected.
//!
//! ## Transparent huge pages
//!
//! The pool asks for transparent huge pages. The kernel write-protects at pte granularity: a
//! scan or a protection that covers part of a huge page splits that huge page's pmd mapping
//! into ptes first, and a write to a protected huge pmd splits it too. So the dirty granularity
//! stays one 4 KiB frame, and the price is that the huge pages holding tracked frames are
//! mapped by ptes from then on (the memory itself stays where it is; khugepaged may collapse
//! it again later). Only frames that were protected pay; the others keep their huge mapping.
//!
//! # The software kind
//!
//! Where the kernel refuses — an older kernel without `WP_ASYNC` or `PAGEMAP_SCAN`, or
//! userfaultfd not permitted (unprivileged with `vm.unprivileged_userfaultfd = 0`; the
//! registration first tries `UFFD_USER_MODE_ONLY`, which an unprivileged process may use) —
//! the bits are a bitmap, one bit per frame, that the mapping API sets with
//! [`DirtyBits::mark_written`] on every writable access it hands out. [`DirtyBits::kind`] and
//! [`DirtyBits::fallback_reason`] say which is in use and why.
//!
//! # The bits' meaning
//!
//! | kind     | written (test reports true)                        | cleared by                      |
//! |----------|-----------------------------------------------------|---------------------------------|
//! | hardware | the frame's pte lost its userfaultfd write protection | `test_and_clear`, `clear`     |
//! | software | `mark_written` set the frame's bit                  | `test_and_clear`, `clear`       |
//!
//! A frame never cleared reads as written under the hardware kind (it was never protected) and
//! as clean under the software kind (no bit set): callers clear a frame when they start
//! tracking it — when a folio is first mapped writable — and never rely on the state before.
//!
//! If the hardware test itself fails (the kernel returns an error, which it does only when out
//! of memory for page tables), the frames are reported written: a spurious write-back costs
//! time, a missed one loses data (rule 6 of docs/RULES.md).

use std::ffi::c_void;
use std::fmt;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{open, Mode, OFlags};
use rustix::io::Errno;
use rustix::ioctl::{self, Ioctl, IoctlOutput, Opcode};
use rustix::mm::{userfaultfd, UserfaultfdFlags};

use crate::mem::folio::FRAME_SIZE;

/// Which dirty bit a [`DirtyBits`] reads.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum DirtyBitKind {
    /// The MMU's record of writes, read through userfaultfd (write-protect, asynchronous) and
    /// `PAGEMAP_SCAN`.
    Hardware,
    /// A bitmap set by the mapping API on every writable access.
    Software,
}

impl DirtyBitKind {
    /// `"hardware"` or `"software"`.
    pub fn name(self) -> &'static str {
        match self {
            DirtyBitKind::Hardware => "hardware",
            DirtyBitKind::Software => "software",
        }
    }
}

/// Which dirty bit to ask for.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum DirtyBitMode {
    /// The hardware bit where the kernel grants it, else the software bit.
    #[default]
    Auto,
    /// The software bit even where the hardware one is available (for tests and comparisons).
    Software,
}

/// The written state of every frame of a pool (see the module documentation).
pub struct DirtyBits {
    base: usize,
    nr_frames: usize,
    hw: Option<Hardware>,
    /// One bit per frame; empty under the hardware kind.
    soft: Box<[AtomicU64]>,
    fallback: Option<String>,
}

struct Hardware {
    /// The userfaultfd; closing it unregisters the pool.
    uffd: OwnedFd,
    /// `/proc/self/pagemap`, for `PAGEMAP_SCAN`.
    pagemap: OwnedFd,
}

impl fmt::Debug for DirtyBits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirtyBits")
            .field("kind", &self.kind())
            .field("nr_frames", &self.nr_frames)
            .field("fallback", &self.fallback)
            .finish()
    }
}

impl DirtyBits {
    /// Dirty bits for the `nr_frames` frames mapped at `base` (a frame-aligned range of this
    /// process's memory that stays mapped as long as the result lives — the frame pool).
    /// Never fails: where the hardware bit is refused it falls back to the software one and
    /// keeps the reason.
    pub fn new(base: *mut u8, nr_frames: usize, mode: DirtyBitMode) -> DirtyBits {
        let base = base as usize;
        debug_assert_eq!(base % FRAME_SIZE, 0);
        let software = |why: String| DirtyBits {
            base,
            nr_frames,
            hw: None,
            soft: (0..nr_frames.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            fallback: Some(why),
        };
        if mode == DirtyBitMode::Software {
            return software("the software dirty bit was asked for".into());
        }
        match Hardware::register(base, nr_frames * FRAME_SIZE) {
            Ok(hw) => DirtyBits {
                base,
                nr_frames,
                hw: Some(hw),
                soft: Box::new([]),
                fallback: None,
            },
            Err(why) => software(why),
        }
    }

    /// Which dirty bit is in use.
    pub fn kind(&self) -> DirtyBitKind {
        if self.hw.is_some() {
            DirtyBitKind::Hardware
        } else {
            DirtyBitKind::Software
        }
    }

    /// Why the software bit is in use (`None` under the hardware kind).
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// The number of frames covered.
    pub fn nr_frames(&self) -> usize {
        self.nr_frames
    }

    fn check(&self, pfn: usize, nr: usize) {
        assert!(
            pfn.checked_add(nr).is_some_and(|end| end <= self.nr_frames),
            "frames {pfn}..+{nr} outside the pool's {} frames",
            self.nr_frames
        );
    }

    /// Records that frames `pfn..pfn + nr` are being written through a mapping. Under the
    /// hardware kind the MMU records it and this does nothing; the mapping API calls it on
    /// every writable access it hands out, so that the software kind sees the same writes.
    #[inline]
    pub fn mark_written(&self, pfn: usize, nr: usize) {
        if self.hw.is_some() {
            return;
        }
        self.check(pfn, nr);
        for f in pfn..pfn + nr {
            let word = &self.soft[f / 64];
            let bit = 1u64 << (f % 64);
            // Test before set: a frame written again and again keeps its line shared.
            if word.load(Ordering::Relaxed) & bit == 0 {
                word.fetch_or(bit, Ordering::Release);
            }
        }
    }

    /// Whether any of frames `pfn..pfn + nr` was written since it was last cleared; clears
    /// them all in the same step. The kernel's `ptep_test_and_clear_dirty` over a folio's
    /// ptes, or s390's storage-key test.
    #[doc(alias = "ptep_test_and_clear_dirty")]
    pub fn test_and_clear(&self, pfn: usize, nr: usize) -> bool {
        self.check(pfn, nr);
        match &self.hw {
            Some(hw) => {
                let mut any = false;
                let r = hw.scan(self.addr(pfn), self.addr(pfn + nr), true, &mut |_, _| {
                    any = true
                });
                // A failed test reports written: see the module documentation.
                r.is_err() || any
            }
            None => {
                let mut any = false;
                for f in pfn..pfn + nr {
                    let bit = 1u64 << (f % 64);
                    let word = &self.soft[f / 64];
                    if word.load(Ordering::Relaxed) & bit != 0 {
                        any |= word.fetch_and(!bit, Ordering::Acquire) & bit != 0;
                    }
                }
                any
            }
        }
    }

    /// The runs of written frames in `pfn..pfn + nr`, as `(first, count)`, without clearing
    /// them. On a hardware failure, the whole range (see the module documentation).
    pub fn written(&self, pfn: usize, nr: usize) -> Vec<(usize, usize)> {
        self.check(pfn, nr);
        let mut out: Vec<(usize, usize)> = Vec::new();
        let mut push = |first: usize, count: usize| match out.last_mut() {
            Some(last) if last.0 + last.1 == first => last.1 += count,
            _ => out.push((first, count)),
        };
        match &self.hw {
            Some(hw) => {
                let mut runs = Vec::new();
                let r = hw.scan(self.addr(pfn), self.addr(pfn + nr), false, &mut |s, e| {
                    runs.push((s, e))
                });
                if r.is_err() {
                    return vec![(pfn, nr)];
                }
                for (s, e) in runs {
                    push(self.pfn(s), (e - s) as usize / FRAME_SIZE);
                }
            }
            None => {
                for f in pfn..pfn + nr {
                    if self.soft[f / 64].load(Ordering::Acquire) & (1u64 << (f % 64)) != 0 {
                        push(f, 1);
                    }
                }
            }
        }
        out
    }

    /// Starts tracking frames `pfn..pfn + nr` from clean, without testing them.
    pub fn clear(&self, pfn: usize, nr: usize) {
        self.check(pfn, nr);
        match &self.hw {
            Some(hw) => {
                if hw.protect(self.addr(pfn), nr * FRAME_SIZE).is_err() {
                    // Could not protect: fall back on the test, which protects what it reports.
                    let _ = self.test_and_clear(pfn, nr);
                }
            }
            None => {
                for f in pfn..pfn + nr {
                    self.soft[f / 64].fetch_and(!(1u64 << (f % 64)), Ordering::Relaxed);
                }
            }
        }
    }

    fn addr(&self, pfn: usize) -> u64 {
        (self.base + pfn * FRAME_SIZE) as u64
    }

    fn pfn(&self, addr: u64) -> usize {
        (addr as usize - self.base) / FRAME_SIZE
    }
}

// The kernel's ABI (include/uapi/linux/userfaultfd.h and fs.h), defined here because rustix does
// not expose these structures.

const UFFD_API: u64 = 0xaa;
const UFFDIO: u8 = 0xaa;
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
const UFFD_USER_MODE_ONLY: u32 = 1;
const PAGE_IS_WRITTEN: u64 = 1 << 1;
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;

#[repr(C)]
#[derive(Default)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
#[derive(Default)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

#[repr(C)]
#[derive(Default, Copy, Clone)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// One read-write ioctl on a `T` that returns the system call's value.
struct Call<'a, T> {
    opcode: Opcode,
    arg: &'a mut T,
}

// SAFETY: each `Call` is made below with the opcode whose kernel structure `T` mirrors
// (`#[repr(C)]`, same fields and sizes as the uapi headers), and the kernel reads and writes
// only within that structure (and, for PAGEMAP_SCAN, within the `vec` array whose address and
// length the caller sets to a live buffer it owns).
unsafe impl<T> Ioctl for Call<'_, T> {
    type Output = IoctlOutput;
    const IS_MUTATING: bool = true;

    fn opcode(&self) -> Opcode {
        self.opcode
    }

    fn as_ptr(&mut self) -> *mut c_void {
        (self.arg as *mut T).cast()
    }

    unsafe fn output_from_ptr(out: IoctlOutput, _: *mut c_void) -> rustix::io::Result<IoctlOutput> {
        Ok(out)
    }
}

fn call<T>(fd: &OwnedFd, opcode: Opcode, arg: &mut T) -> Result<IoctlOutput, Errno> {
    // SAFETY: see the `Ioctl` impl of `Call`; the callers below pair each opcode with its
    // structure.
    unsafe { ioctl::ioctl(fd, Call { opcode, arg }) }
}

const UFFDIO_API_OP: Opcode = ioctl::opcode::read_write::<UffdioApi>(UFFDIO, 0x3f);
const UFFDIO_REGISTER_OP: Opcode = ioctl::opcode::read_write::<UffdioRegister>(UFFDIO, 0x00);
const UFFDIO_WRITEPROTECT_OP: Opcode =
    ioctl::opcode::read_write::<UffdioWriteprotect>(UFFDIO, 0x06);
const PAGEMAP_SCAN_OP: Opcode = ioctl::opcode::read_write::<PmScanArg>(b'f', 16);

impl Hardware {
    /// Registers `len` bytes at `base` for asynchronous write protection and opens the
    /// pagemap; the error says why not.
    fn register(base: usize, len: usize) -> Result<Hardware, String> {
        let flags = UserfaultfdFlags::CLOEXEC | UserfaultfdFlags::NONBLOCK;
        // SAFETY: the descriptor only ever serves write-protection of the pool's range, whose
        // faults the kernel resolves itself (WP_ASYNC): nothing is read from it.
        let uffd = match unsafe { userfaultfd(flags) } {
            Ok(fd) => fd,
            Err(e @ (Errno::PERM | Errno::ACCESS)) => {
                let user_only = flags | UserfaultfdFlags::from_bits_retain(UFFD_USER_MODE_ONLY);
                // SAFETY: as above.
                unsafe { userfaultfd(user_only) }.map_err(|e2| {
                    format!(
                        "userfaultfd refused ({e}; with UFFD_USER_MODE_ONLY: {e2}; \
                         vm.unprivileged_userfaultfd is probably 0)"
                    )
                })?
            }
            Err(e) => return Err(format!("userfaultfd unavailable: {e}")),
        };
        let mut api = UffdioApi {
            api: UFFD_API,
            features: UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED,
            ioctls: 0,
        };
        call(&uffd, UFFDIO_API_OP, &mut api).map_err(|e| {
            format!("userfaultfd without asynchronous write protection (Linux < 6.7?): {e}")
        })?;
        let mut reg = UffdioRegister {
            range: UffdioRange {
                start: base as u64,
                len: len as u64,
            },
            mode: UFFDIO_REGISTER_MODE_WP,
            ioctls: 0,
        };
        call(&uffd, UFFDIO_REGISTER_OP, &mut reg)
            .map_err(|e| format!("userfaultfd write-protect registration refused: {e}"))?;
        let pagemap = open(
            "/proc/self/pagemap",
            OFlags::RDONLY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("/proc/self/pagemap: {e}"))?;
        let hw = Hardware { uffd, pagemap };
        // The scan ioctl is the newest piece (Linux 6.7): try it on the first frame.
        hw.scan(
            base as u64,
            (base + FRAME_SIZE) as u64,
            false,
            &mut |_, _| {},
        )
        .map_err(|e| format!("PAGEMAP_SCAN refused: {e}"))?;
        Ok(hw)
    }

    /// Walks `[start, end)` for written pages, calling `found` with each run of them;
    /// write-protects what it reports when `clear`.
    fn scan(
        &self,
        start: u64,
        end: u64,
        clear: bool,
        found: &mut dyn FnMut(u64, u64),
    ) -> Result<(), Errno> {
        let mut regions = [PageRegion::default(); 8];
        let mut at = start;
        while at < end {
            let mut arg = PmScanArg {
                size: std::mem::size_of::<PmScanArg>() as u64,
                flags: if clear {
                    PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC
                } else {
                    0
                },
                start: at,
                end,
                vec: regions.as_mut_ptr() as u64,
                vec_len: regions.len() as u64,
                category_mask: PAGE_IS_WRITTEN,
                return_mask: PAGE_IS_WRITTEN,
                ..PmScanArg::default()
            };
            let n = call(&self.pagemap, PAGEMAP_SCAN_OP, &mut arg)? as usize;
            for r in &regions[..n.min(regions.len())] {
                found(r.start, r.end);
            }
            if arg.walk_end <= at {
                // No progress: the kernel would loop; treat as a failure.
                return Err(Errno::AGAIN);
            }
            at = arg.walk_end;
        }
        Ok(())
    }

    /// Write-protects `[start, start + len)`.
    fn protect(&self, start: u64, len: usize) -> Result<(), Errno> {
        let mut wp = UffdioWriteprotect {
            range: UffdioRange {
                start,
                len: len as u64,
            },
            mode: UFFDIO_WRITEPROTECT_MODE_WP,
        };
        call(&self.uffd, UFFDIO_WRITEPROTECT_OP, &mut wp).map(drop)
    }
}
