//! File operations whose work is the state's (the kernel's `fs/fuse/file.c` side): reads through
//! the page cache into the serving thread's buffer, writes, `lseek` and `fallocate`.

use super::*;

/// What a write leaves for after its reply: the write-back of its file, where write-behind is
/// due (see [`Serve::write`] for [`QuireFs`]).
#[derive(Debug)]
pub struct WriteBehind(Option<Arc<FileData>>);

impl AfterReply for WriteBehind {
    fn run(self) {
        // Through the mapping's own handle: an error is recorded for every handle's fsync,
        // and none is taken from the writer's.
        if let Some(file) = self.0 {
            let _ = file.main.flush();
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_none()
    }
}

impl FsState {
    pub(super) fn read<'a>(&self, fh: FileHandle, offset: u64, buf: ReadBuf<'a>) -> R<&'a [u8]> {
        let s = self;
        s.counters.op(Op::Read);
        let h = s.handle(fh)?;
        let buf = buf.take();
        match h.cf.read_at(offset, buf) {
            Ok(n) => {
                s.counters.read(n);
                Ok(&buf[..n])
            }
            // The backing file was cut behind the mount, or the offset is past any file:
            // end of file.
            Err(e) if is_eof(&e) || matches!(e, quire::filemap::FilemapError::Overflow { .. }) => {
                Ok(&[])
            }
            Err(e) => Err(errno::of_filemap(&e)),
        }
    }

    /// A read that would wait for the store, as a future ([`Serve::read_deferred`]): `None`
    /// when every byte is cached (the serving thread reads it at once, into its own buffer)
    /// or the handle is unknown (the blocking path reports it).
    pub(super) fn read_deferred(
        self: Arc<Self>,
        fh: FileHandle,
        offset: u64,
        size: u32,
    ) -> Option<crate::serve::Deferred> {
        let h = self.handle(fh).ok()?;
        if h.cf.is_cached(offset, size as usize) {
            return None;
        }
        Some(Box::pin(async move {
            let s = &self;
            s.counters.op(Op::Read);
            let mut buf = vec![0u8; size as usize];
            match h.cf.read_at_async(offset, &mut buf).await {
                Ok(n) => {
                    s.counters.read(n);
                    buf.truncate(n);
                    Ok(buf)
                }
                // As in `read`: the backing file was cut behind the mount, or the offset is
                // past any file.
                Err(e)
                    if is_eof(&e) || matches!(e, quire::filemap::FilemapError::Overflow { .. }) =>
                {
                    Ok(Vec::new())
                }
                Err(e) => {
                    s.counters.error();
                    Err(errno::of_filemap(&e))
                }
            }
        }))
    }

    pub(super) fn write(
        &self,
        req: &Req,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
    ) -> R<(u32, WriteBehind)> {
        let s = self;
        s.counters.op(Op::Write);
        let h = s.handle(fh)?;
        if h.file.backing.has_privs() {
            s.kill_privs(req, &h.file)?;
        }
        let end = offset.checked_add(data.len() as u64).ok_or(Errno::EFBIG)?;
        s.check_size(end)?;
        if s.cfg.check_space {
            s.space.take(data.len() as u64, s)?;
        }
        let n =
            h.cf.write_at(offset, data)
                .map_err(|e| errno::of_filemap(&e))?;
        h.file.touch();
        s.counters.written(n);
        // Write-behind: a file written fast while dirty memory is above the flusher's
        // threshold is written back by the thread that served the write, after the reply — so
        // several writers' data goes out on several threads at once rather than through the
        // one flusher, while the writer goes on.
        let mut behind = WriteBehind(None);
        let w = h.written.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if w >= WRITE_BEHIND_EVERY {
            h.written.store(0, Ordering::Relaxed);
            // A handle exists only where the table has a cache.
            if let Some(cache) = s.files.cache() {
                let dirty = (cache.stats().dirty_frames as u64) << 12;
                if dirty > cache.config().dirty_background as u64 {
                    behind = WriteBehind(Some(h.file.clone()));
                }
            }
        }
        Ok((n as u32, behind))
    }

    /// [`FsState::kill_privs_fd`] on `file`'s backing file, then notes the change as made
    /// through the mount.
    pub(super) fn kill_privs(&self, req: &Req, file: &FileData) -> R<()> {
        if self.kill_privs_fd(req, file.backing.fd())? {
            file.backing.restamp();
        }
        Ok(())
    }

    /// Clears the set-user-id bit, and the set-group-id bit where the file is group-executable
    /// or the caller is not in its group, of the open file `fd` before a write by a caller
    /// without `CAP_FSETID` — what the kernel's `file_remove_privs` does for a write
    /// (`setattr_should_drop_suidgid`), and does not do for a FUSE file opened for direct I/O.
    /// `false` where the caller holds `CAP_FSETID` (the file was not looked at).
    #[doc(alias = "file_remove_privs")]
    pub(super) fn kill_privs_fd(&self, req: &Req, fd: BorrowedFd<'_>) -> R<bool> {
        let caller = Caller::of(req);
        if caller.capable(CapabilitySet::FSETID) {
            return Ok(false);
        }
        let st = statx_fd(fd).map_err(errno::of_sys)?;
        let mode = u32::from(st.stx_mode) & 0o7777;
        let mut kept = mode & !libc::S_ISUID;
        if mode & libc::S_ISGID != 0 && (mode & libc::S_IXGRP != 0 || !caller.in_group(st.stx_gid))
        {
            kept &= !libc::S_ISGID;
        }
        if kept != mode {
            rustix::fs::fchmod(fd, Mode::from_raw_mode(kept)).map_err(errno::of_sys)?;
        }
        Ok(true)
    }

    /// `SEEK_DATA` and `SEEK_HOLE` (the kernel answers the other kinds itself): the file's
    /// dirty data is written back first, then the backing file is asked, so that data and
    /// holes are where the backing file system has them. Past the backing file's end, up to
    /// the length the mount gives the file (extended by a cut not yet written), is a hole.
    pub(super) fn lseek(&self, fh: FileHandle, offset: i64, whence: i32) -> R<i64> {
        let s = self;
        s.counters.op(Op::Lseek);
        let h = s.handle(fh)?;
        let f = &h.file;
        let len = f.main.len();
        let data = match whence {
            libc::SEEK_DATA => true,
            libc::SEEK_HOLE => false,
            _ => return Err(Errno::EINVAL),
        };
        if offset < 0 || offset as u64 >= len {
            return Err(Errno::ENXIO);
        }
        f.main.flush().map_err(|e| errno::of_filemap(&e))?;
        let at = offset as u64;
        let whence = if data {
            rustix::fs::SeekFrom::Data(at)
        } else {
            rustix::fs::SeekFrom::Hole(at)
        };
        let found = match rustix::fs::seek(f.backing.fd(), whence) {
            Ok(pos) => pos.min(len),
            // Past the backing file's end: a hole up to the mount's length.
            Err(rustix::io::Errno::NXIO) if !data => at,
            Err(e) => return Err(errno::of_sys(e)),
        };
        Ok(found as i64)
    }

    pub(super) fn fallocate(&self, fh: FileHandle, offset: u64, length: u64, mode: i32) -> R<()> {
        let s = self;
        s.counters.op(Op::Fallocate);
        let h = s.handle(fh)?;
        let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
        s.check_size(end)?;
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let f = &h.file;
        match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => {
                rustix::fs::fallocate(f.backing.fd(), FallocateFlags::KEEP_SIZE, offset, length)
                    .map_err(errno::of_sys)?;
                if !keep && end > f.main.len() {
                    f.main.set_len(end).map_err(|e| errno::of_filemap(&e))?;
                }
            }
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE => {
                let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
                if punch && !keep {
                    return Err(Errno::EINVAL);
                }
                let len = f.main.len();
                // Through the cache first (zeros where the range lies inside the file), written
                // back, then the blocks freed in the backing file: cached and stored bytes agree.
                // A range larger than ZERO_THROUGH_CACHE is not zeroed through the cache: its
                // data is written back, the blocks freed, and the file's cached clean data
                // dropped (folios a reader holds at that moment keep their old bytes for it).
                const ZERO_THROUGH_CACHE: u64 = 64 << 20;
                let zero_end = end.min(len);
                let coarse = zero_end.saturating_sub(offset) > ZERO_THROUGH_CACHE;
                let mut at = if coarse { zero_end } else { offset };
                let zeros = vec![0u8; 1 << 20];
                while at < zero_end {
                    let n = ((zero_end - at) as usize).min(zeros.len());
                    f.main
                        .write_all_at(at, &zeros[..n])
                        .map_err(|e| errno::of_filemap(&e))?;
                    at += n as u64;
                }
                f.main.flush().map_err(|e| errno::of_filemap(&e))?;
                let flags = if punch {
                    FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE
                } else {
                    FallocateFlags::ZERO_RANGE | FallocateFlags::KEEP_SIZE
                };
                rustix::fs::fallocate(f.backing.fd(), flags, offset, length)
                    .map_err(errno::of_sys)?;
                if coarse {
                    let _ = f.main.invalidate();
                }
                if !punch && !keep && end > len {
                    f.main.set_len(end).map_err(|e| errno::of_filemap(&e))?;
                }
            }
            _ => return Err(Errno::EOPNOTSUPP),
        }
        f.touch();
        f.backing.restamp();
        Ok(())
    }
}
