//! [`Fuse`]: any [`Serve`] file system as a [`fuser::Filesystem`] — fuser's signatures, and
//! every result turned into the kernel's reply.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::io;
use std::ops::Deref;
use std::path::Path;
use std::time::SystemTime;

use fuser::{
    BsdFileFlags, Errno, FileAttr, FileHandle, Filesystem, Generation, INodeNo, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::{AfterReply, Deferred, Open, ReadBuf, Req, Res, Serve, SetAttr, Xattr};

thread_local! {
    /// Each FUSE thread's read buffer (up to the largest read the kernel sends).
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A fuser reply, which can always carry an error.
trait Failable {
    fn fail(self, err: Errno);
}

macro_rules! failable {
    ($($reply:ty),* $(,)?) => {
        $(impl Failable for $reply {
            #[inline]
            fn fail(self, err: Errno) {
                self.error(err);
            }
        })*
    };
}

failable!(
    ReplyAttr,
    ReplyCreate,
    ReplyData,
    ReplyDirectory,
    ReplyDirectoryPlus,
    ReplyEmpty,
    ReplyEntry,
    ReplyLseek,
    ReplyOpen,
    ReplyStatfs,
    ReplyWrite,
    ReplyXattr,
);

/// A [`Serve`] file system, ready to mount ([`crate::mount::serve`]): the one implementation of
/// [`fuser::Filesystem`] in this crate. It dereferences to the file system.
#[derive(Debug)]
pub struct Fuse<S> {
    /// Shared with the io_uring channel's queue threads, which serve it beside fuser's.
    fs: std::sync::Arc<S>,
    /// The io_uring channel: armed by [`crate::mount::serve`], started at INIT.
    ring: std::sync::Arc<RingSlot>,
    /// Where deferred reads wait ([`Serve::read_deferred`]): one thread polling them on its own
    /// ring (`serve/reader.rs`), started at the first one (after the daemon detached), `None` if
    /// it could not start.
    rt: std::sync::OnceLock<Option<super::reader::Reader>>,
    /// Serving threads inside a blocking READ right now: a read that misses is deferred only
    /// while another thread already reads (one miss at a time blocks its thread, with the
    /// lowest latency; the next ones wait on the reader and leave their threads free).
    reading: std::sync::atomic::AtomicUsize,
    /// Whether misses may be deferred at all: only with `QUIRE_FUSE_DEFER_READS=1`. Off by
    /// default because on the 2-CPU machines this is measured on it does not pay: with a tokio
    /// runtime, `fuse` zipf-randread at 4 jobs ran 46–47 thousand reads a second deferred
    /// against 61–62 thousand blocking; with the reader on its own ring, five alternated runs
    /// each gave medians of 53.6 thousand deferred and 53.1 thousand blocking, and sequential
    /// reads at 1 job lower (docs/journal/).
    defer: bool,
}

impl<S> Fuse<S> {
    /// Wraps `fs`.
    pub fn new(fs: S) -> Fuse<S> {
        Fuse {
            fs: std::sync::Arc::new(fs),
            ring: std::sync::Arc::default(),
            rt: std::sync::OnceLock::new(),
            reading: std::sync::atomic::AtomicUsize::new(0),
            defer: std::env::var("QUIRE_FUSE_DEFER_READS").is_ok_and(|v| v == "1"),
        }
    }

    fn reader(&self) -> Option<&super::reader::Reader> {
        self.rt.get_or_init(super::reader::Reader::start).as_ref()
    }

    /// Answers a READ with `fut` from the reader thread when it is done (or, with no reader, by
    /// waiting here). The future is not polled here: a deferred read is a miss, and polled on
    /// the reader, inside its ring, the miss is submitted to that ring.
    fn read_later(&self, fut: Deferred, reply: ReplyData) {
        match self.reader() {
            Some(r) => r.defer(fut, Box::new(move |res| super::reader::answer(reply, res))),
            None => super::reader::answer(reply, quire::filemap::block_on(fut)),
        }
    }

    /// The file system (`None` while a queue of the io_uring channel still holds it).
    pub fn into_inner(self) -> Option<S> {
        std::sync::Arc::into_inner(self.fs)
    }

    /// Where [`crate::mount::serve`] arms the io_uring channel before the session starts.
    pub(crate) fn ring_slot(&self) -> std::sync::Arc<RingSlot> {
        self.ring.clone()
    }
}

/// The io_uring channel of one mount: what `serve` asked for, and the running queues.
#[derive(Debug, Default)]
pub(crate) struct RingSlot {
    armed: parking_lot::Mutex<Option<RingWant>>,
    running: parking_lot::Mutex<Option<crate::ring::Ring>>,
    /// The mount's `/dev/fuse` descriptor, once fuser's session is made.
    pub(crate) fuse: std::sync::Arc<crate::ring::FdCell>,
}

/// The io_uring channel asked for at mount.
#[derive(Debug)]
pub(crate) struct RingWant {
    /// Entries per queue.
    pub entries: usize,
    /// Fail the mount rather than fall back to the classic channel.
    pub required: bool,
    /// Why io_uring (what was asked).
    pub why: String,
}

impl RingSlot {
    pub(crate) fn arm(&self, want: RingWant) {
        *self.armed.lock() = Some(want);
    }
}

/// The largest request the kernel may put in a ring entry's payload, as the kernel sizes it:
/// the largest of a minimum read buffer, `max_write`, and `max_pages` pages (from the larger of
/// `max_write` and `max_readahead`, as fuser reports it).
fn ring_payload(config: &mut KernelConfig) -> usize {
    let page = rustix::param::page_size();
    let max_write = config.set_max_write(1 << 20).unwrap_or(1 << 20);
    let _ = config.set_max_write(max_write);
    let ra = config.set_max_readahead(1 << 20).unwrap_or(1 << 20);
    let _ = config.set_max_readahead(ra);
    let pages = (max_write.max(ra) as usize).div_ceil(page);
    (8192usize).max(max_write as usize).max(pages * page)
}

impl<S> Deref for Fuse<S> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.fs
    }
}

impl<S: Serve> Fuse<S> {
    /// Answers with `ok` on success; else tells the file system and answers the `errno`.
    #[inline]
    fn answer<R: Failable, T>(&self, reply: R, result: Res<T>, ok: impl FnOnce(R, T)) {
        match result {
            Ok(v) => ok(reply, v),
            Err(err) => {
                self.fs.failed(err);
                reply.fail(err);
            }
        }
    }

    #[inline]
    fn entry(&self, reply: ReplyEntry, result: Res<FileAttr>) {
        self.answer(reply, result, |r, attr| {
            r.entry(&self.fs.ttl(), &attr, Generation(0))
        });
    }

    #[inline]
    fn attr(&self, reply: ReplyAttr, result: Res<FileAttr>) {
        self.answer(reply, result, |r, attr| r.attr(&self.fs.ttl(), &attr));
    }

    #[inline]
    fn empty(&self, reply: ReplyEmpty, result: Res<()>) {
        self.answer(reply, result, |r, ()| r.ok());
    }

    fn opened(&self, reply: ReplyOpen, result: Res<Open>) {
        self.answer(reply, result, |r, o| r.opened(o.fh, o.flags));
    }

    /// A value's length if the caller asked for it (`size` 0), `ERANGE` if it does not fit
    /// the caller's buffer, else the value.
    fn xattr(&self, reply: ReplyXattr, size: u32, result: Res<Xattr>) {
        self.answer(reply, result, |r, x| match x {
            Xattr::Value(v) if size == 0 => r.size(v.len() as u32),
            Xattr::Value(v) if v.len() > size as usize => r.error(Errno::ERANGE),
            Xattr::Value(v) => r.data(&v),
            Xattr::NoValue(err) => r.error(err),
        });
    }
}

impl<S: Serve> Filesystem for Fuse<S> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        let _ = config.set_max_write(1 << 20);
        // Reads of up to 1 MiB: no more than the ring's payload buffers hold.
        let _ = config.set_max_readahead(1 << 20);
        let _ = config.set_max_background(64);
        std::sync::Arc::get_mut(&mut self.fs)
            .ok_or_else(|| io::Error::other("the file system is shared before INIT"))?
            .init(config)?;
        let Some(want) = self.ring.armed.lock().take() else {
            return Ok(());
        };
        let offered = config
            .capabilities()
            .contains(fuser::InitFlags::FUSE_OVER_IO_URING);
        if !offered {
            let why = "the kernel did not offer FUSE_OVER_IO_URING at INIT".to_string();
            if want.required {
                return Err(io::Error::other(format!("no io_uring channel: {why}")));
            }
            crate::mount::channel_chosen(crate::stats::Channel {
                why,
                ..Default::default()
            });
            return Ok(());
        }
        let payload = ring_payload(config);
        let fallback = |why: String| -> io::Result<()> {
            if want.required {
                return Err(io::Error::other(format!("no io_uring channel: {why}")));
            }
            crate::mount::channel_chosen(crate::stats::Channel {
                why,
                ..Default::default()
            });
            Ok(())
        };
        let cpus = match crate::ring::cpus() {
            Ok(c) => c,
            Err(e) => return fallback(e.to_string()),
        };
        // A thread per entry: a miss holds one thread and its entry while the others serve the
        // CPU's next requests. (Two threads of two entries each served misses a third slower
        // than the classic channel at 4 fio jobs; four of one, half as fast again as it.)
        let per_queue = want.entries.max(1);
        // Rings and buffers first: only then is the channel asked for, so the kernel never
        // waits for rings that cannot be made.
        let ring = match crate::ring::Ring::start(
            self.fs.clone(),
            self.ring.fuse.clone(),
            &cpus,
            per_queue,
            payload,
        ) {
            Ok(r) => r,
            Err(e) => return fallback(format!("the rings could not be made: {e}")),
        };
        if config
            .add_capabilities(fuser::InitFlags::FUSE_OVER_IO_URING)
            .is_err()
        {
            self.ring.fuse.set(None);
            ring.join();
            return fallback("the kernel did not take FUSE_OVER_IO_URING".into());
        }
        let queues = cpus.len();
        let threads = cpus
            .iter()
            .map(|&on| if on { per_queue } else { 1 })
            .sum::<usize>();
        crate::mount::channel_chosen(crate::stats::Channel {
            uring: true,
            queues,
            entries: per_queue,
            buffer_bytes: (threads * (payload + crate::ring::abi::HEADER_SIZE)) as u64,
            why: want.why,
        });
        let shared = ring.shared().clone();
        crate::stats::set_ring_counter(std::sync::Arc::new(move || shared.served()));
        crate::mount::watch_ring(ring.shared().clone());
        *self.ring.running.lock() = Some(ring);
        Ok(())
    }

    fn destroy(&mut self) {
        // The connection is gone: the queues' commands end, and so do their threads (those
        // still waiting for the descriptor, after a failed mount, are told there is none).
        self.ring.fuse.set(None);
        if let Some(ring) = self.ring.running.lock().take() {
            ring.join();
        }
        match std::sync::Arc::get_mut(&mut self.fs) {
            Some(fs) => fs.destroy(),
            None => eprintln!("quire-fuse: a ring queue still holds the file system at unmount"),
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.entry(reply, self.fs.lookup(parent, name));
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.fs.forget(ino, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        self.attr(reply, self.fs.getattr(ino, fh));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            fh,
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        };
        self.attr(reply, self.fs.setattr(ino, &set));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        self.answer(reply, self.fs.readlink(ino), |r, target| r.data(&target));
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.entry(
            reply,
            self.fs.mknod(&Req::from(req), parent, name, mode, rdev),
        );
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.entry(reply, self.fs.mkdir(&Req::from(req), parent, name, mode));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(reply, self.fs.unlink(parent, name));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(reply, self.fs.rmdir(parent, name));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.entry(
            reply,
            self.fs.symlink(&Req::from(req), parent, link_name, target),
        );
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.fs.rename(parent, name, newparent, newname, flags);
        self.empty(reply, r);
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.entry(
            reply,
            self.fs.link(&Req::from(req), ino, newparent, newname),
        );
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.opened(reply, self.fs.open(ino, flags));
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self.fs.create(&Req::from(req), parent, name, mode, flags);
        self.answer(reply, r, |r, (attr, o)| {
            r.created(&self.fs.ttl(), &attr, Generation(0), o.fh, o.flags)
        });
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        use std::sync::atomic::Ordering::Relaxed;
        if self.defer && self.reading.load(Relaxed) > 0 {
            if let Some(fut) = self.fs.read_deferred(ino, fh, offset, size) {
                self.read_later(fut, reply);
                return;
            }
        }
        self.reading.fetch_add(1, Relaxed);
        READ_BUF.with(|b| {
            let mut b = b.borrow_mut();
            let buf = ReadBuf::grow(&mut b, size as usize);
            self.answer(reply, self.fs.read(ino, fh, offset, buf), |r, data| {
                r.data(data)
            });
        });
        self.reading.fetch_sub(1, Relaxed);
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.fs.write(&Req::from(req), ino, fh, offset, data);
        self.answer(reply, r, |r, (n, after)| {
            r.written(n);
            after.run();
        });
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, self.fs.flush(ino, fh));
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, self.fs.release(ino, fh));
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, self.fs.fsync(ino, fh, datasync));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.opened(reply, self.fs.opendir(ino, flags));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.fs.readdir(ino, fh, offset, &mut reply);
        self.answer(reply, r, |r, ()| r.ok());
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let r = self.fs.readdirplus(ino, fh, offset, &mut reply);
        self.answer(reply, r, |r, ()| r.ok());
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, self.fs.releasedir(ino, fh));
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, self.fs.fsyncdir(ino, fh, datasync));
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        self.answer(reply, self.fs.statfs(ino), |r, s| {
            r.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            )
        });
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, self.fs.setxattr(ino, name, value, flags));
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        self.xattr(reply, size, self.fs.getxattr(ino, name, size));
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.xattr(reply, size, self.fs.listxattr(ino, size));
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.empty(reply, self.fs.removexattr(ino, name));
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.empty(reply, self.fs.fallocate(ino, fh, offset, length, mode));
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let r = self.fs.lseek(ino, fh, offset, whence);
        self.answer(reply, r, |r, off| r.offset(off));
    }
}
