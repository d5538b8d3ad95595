//! The server, the proxy and the FUSE daemons: started, logged, bounded by memory groups,
//! stopped.

use super::*;

/// A child process killed when dropped.
pub(super) struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for a port file a starting server writes atomically.
pub(super) fn wait_port(
    child: &mut Child,
    file: &Path,
    what: &str,
    log: &Path,
) -> anyhow::Result<u16> {
    let t0 = Instant::now();
    loop {
        if let Ok(s) = fs::read_to_string(file) {
            if let Ok(p) = s.trim().parse() {
                return Ok(p);
            }
        }
        if let Some(st) = child.try_wait()? {
            bail!("{what} exited ({st}): {}", tail(log));
        }
        if t0.elapsed() > Duration::from_secs(20) {
            bail!("{what} wrote no port within 20 s: {}", tail(log));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The last lines of a log file, for an error message.
pub(super) fn tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

pub(super) fn spawn_logged(cmd: &mut Command, log: &Path) -> anyhow::Result<Child> {
    let out = File::create(log)?;
    let err = out.try_clone()?;
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))
}

/// The server and the proxy in front of it.
pub(super) struct Network {
    _server: Proc,
    _proxy: Proc,
    /// The proxy's port: every client's endpoint.
    port: u16,
}

impl Network {
    pub(super) fn start(tools: &S3Tools, root: &Path, dir: &Path) -> anyhow::Result<Network> {
        let (sport, slog) = (dir.join("server.port"), dir.join("server.log"));
        let mut server = spawn_logged(
            Command::new(&tools.server)
                .arg("--root")
                .arg(root)
                .args(["--addr", "127.0.0.1:0", "--port-file"])
                .arg(&sport)
                .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
                .args(["--bucket", BUCKET]),
            &slog,
        )?;
        let server_port = wait_port(&mut server, &sport, "quire-s3-server", &slog)?;
        let server = Proc(server);
        let (pport, cport, plog) = (
            dir.join("proxy.port"),
            dir.join("proxy.control"),
            dir.join("proxy.log"),
        );
        let mut proxy = spawn_logged(
            Command::new(&tools.proxy)
                .arg("--upstream")
                .arg(format!("127.0.0.1:{server_port}"))
                .args(["--listen", "127.0.0.1:0"])
                .arg("--delay-ms")
                .arg(DELAY_MS.to_string())
                .arg("--bandwidth-mbps")
                .arg(BANDWIDTH_MBPS.to_string())
                .arg("--port-file")
                .arg(&pport)
                .arg("--control-port-file")
                .arg(&cport),
            &plog,
        )?;
        let port = wait_port(&mut proxy, &pport, "quire-s3-proxy", &plog)?;
        Ok(Network {
            _server: server,
            _proxy: Proc(proxy),
            port,
        })
    }

    pub(super) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

pub(super) fn is_mounted(mnt: &Path) -> bool {
    let want = mnt.to_string_lossy();
    fs::read_to_string("/proc/self/mountinfo").is_ok_and(|info| {
        info.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            f.len() > 4 && f[4] == want && l.contains(" - fuse")
        })
    })
}

pub(super) fn rss(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// A mounted daemon of one variant (in its memory group, for the peers).
pub(super) struct Mounted {
    pub(super) child: Child,
    pub(super) mnt: PathBuf,
    pub(super) log: PathBuf,
    /// The peer's bound, following its own memory once it is mounted (before `group`, so
    /// that it stops before the group is removed).
    pub(super) follower: Option<Follower>,
    pub(super) group: Option<MemGroup>,
}

impl Mounted {
    /// Unmounts and waits for the daemon to exit (a peer may be finishing uploads); what its
    /// memory group held at most, for a peer.
    pub(super) fn stop(mut self) -> anyhow::Result<Option<Peaks>> {
        let mut tries = 0;
        while let Err(e) = rustix::mount::unmount(&self.mnt, rustix::mount::UnmountFlags::empty()) {
            if !is_mounted(&self.mnt) {
                break;
            }
            tries += 1;
            if tries > 250 {
                let _ = rustix::mount::unmount(&self.mnt, rustix::mount::UnmountFlags::DETACH);
                bail!("unmounting {}: {e}", self.mnt.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let t0 = Instant::now();
        while self.child.try_wait()?.is_none() {
            if t0.elapsed() > Duration::from_secs(120) {
                let _ = self.child.kill();
                bail!("the daemon did not exit within 120 s of its unmount");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(self.follower.take().map(Follower::finish))
    }

    /// Why the daemon is gone, if it is.
    pub(super) fn died(&mut self) -> Option<String> {
        let st = self.child.try_wait().ok().flatten()?;
        let oom = self.group.as_ref().map_or(0, MemGroup::oom_kills);
        Some(if oom > 0 {
            format!("killed by its memory group ({st}, {oom} OOM kill(s))")
        } else {
            format!("exited ({st}): {}", tail(&self.log))
        })
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // Also where the daemon died: its mount is left behind, not connected.
        if is_mounted(&self.mnt) {
            let _ = rustix::mount::unmount(&self.mnt, rustix::mount::UnmountFlags::DETACH);
        }
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
