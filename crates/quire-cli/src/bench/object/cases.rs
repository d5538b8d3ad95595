//! The cases, run on each variant's mount, and the measurements they share.

use super::daemons::{is_mounted, rss, spawn_logged, tail, Mounted};
use super::*;

impl Env {
    pub(super) fn cache_dir(&self, variant: &str, phase: &str) -> PathBuf {
        self.scratch.path(&format!("cache-{variant}-{phase}"))
    }

    /// Starts the daemon of `variant` with its disk cache in `cache`, in a memory group for a
    /// peer, and waits until it is mounted.
    pub(super) fn mount(&self, variant: &str, cache: &Path) -> anyhow::Result<Mounted> {
        fs::create_dir_all(cache)?;
        let log = self.scratch.path(&format!("{variant}.log"));
        let endpoint = self.net.endpoint();
        let group = match (&self.groups, variant) {
            (Some(g), "rclone" | "s3fs") => {
                let grp = g.group(&format!("object-{variant}"), None)?;
                // Room to start; the bound is set once it is mounted.
                grp.set_limit(self.sz.budget + (256 << 20))?;
                Some(grp)
            }
            _ => None,
        };
        let (prog, args): (PathBuf, Vec<String>) = match variant {
            "quire" => {
                let q = self.quire.as_ref().context("no quire mount")?;
                let mut a: Vec<String> = vec![
                    "mount".into(),
                    "--foreground".into(),
                    "--capacity".into(),
                    self.sz.budget.to_string(),
                    "--threads".into(),
                    DAEMON_THREADS.to_string(),
                ];
                if q.disk_tier {
                    a.push("--disk-cache".into());
                    a.push(cache.display().to_string());
                    a.push("--disk-size".into());
                    a.push(format!("{}M", self.sz.disk >> 20));
                }
                if q.staging {
                    let staging = self.scratch.path("staging-quire");
                    fs::create_dir_all(&staging)?;
                    a.push("--staging".into());
                    a.push(staging.display().to_string());
                }
                a.push(format!("s3://{BUCKET}"));
                a.push(self.mnt.display().to_string());
                (std::env::current_exe()?, a)
            }
            "rclone" => {
                let a: Vec<String> = vec![
                    "mount".into(),
                    format!(":s3:{BUCKET}"),
                    self.mnt.display().to_string(),
                    "--config".into(),
                    String::new(),
                    "--s3-provider".into(),
                    "Other".into(),
                    "--s3-endpoint".into(),
                    endpoint.clone(),
                    "--s3-access-key-id".into(),
                    ACCESS_KEY.into(),
                    "--s3-secret-access-key".into(),
                    SECRET_KEY.into(),
                    "--s3-region".into(),
                    "us-east-1".into(),
                    "--vfs-cache-mode".into(),
                    "full".into(),
                    "--vfs-cache-max-size".into(),
                    format!("{}Mi", self.sz.disk >> 20),
                    "--cache-dir".into(),
                    cache.display().to_string(),
                    "--vfs-write-back".into(),
                    "0s".into(),
                ];
                (self.rclone.clone().context("no rclone")?, a)
            }
            "s3fs" => {
                let pw = self.scratch.path("s3fs.passwd");
                fs::write(&pw, format!("{ACCESS_KEY}:{SECRET_KEY}\n"))?;
                fs::set_permissions(&pw, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
                let a: Vec<String> = vec![
                    BUCKET.into(),
                    self.mnt.display().to_string(),
                    "-f".into(),
                    "-o".into(),
                    format!("url={endpoint}"),
                    "-o".into(),
                    "use_path_request_style".into(),
                    "-o".into(),
                    format!("passwd_file={}", pw.display()),
                    "-o".into(),
                    format!("use_cache={}", cache.display()),
                ];
                (self.s3fs.clone().context("no s3fs")?, a)
            }
            _ => bail!("no variant {variant}"),
        };
        let mut cmd = match &group {
            // The shell joins the group and then becomes the daemon, so that every thread and
            // every page it touches is charged there from the start.
            Some(g) => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(r#"echo $$ > "$0" && exec "$@""#)
                    .arg(g.procs())
                    .arg(&prog);
                c
            }
            None => Command::new(&prog),
        };
        cmd.args(&args);
        for v in [
            "AWS_CA_BUNDLE",
            "AWS_PROFILE",
            "AWS_SESSION_TOKEN",
            "AWS_DEFAULT_REGION",
            "AWS_CONFIG_FILE",
            "AWS_SHARED_CREDENTIALS_FILE",
        ] {
            cmd.env_remove(v);
        }
        if variant == "quire" {
            cmd.env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
                .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
                .env("AWS_REGION", "us-east-1")
                .env("AWS_ENDPOINT_URL", &endpoint)
                .env("AWS_ALLOW_HTTP", "true");
        }
        let child = spawn_logged(&mut cmd, &log)?;
        let mut m = Mounted {
            child,
            mnt: self.mnt.clone(),
            log,
            follower: None,
            group,
        };
        let t0 = Instant::now();
        while !is_mounted(&self.mnt) {
            if let Some(why) = m.died() {
                bail!("the {variant} daemon {why}");
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!(
                    "the {variant} daemon did not mount within 60 s: {}",
                    tail(&m.log)
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // Mounted: from now on the bound follows what the daemon holds of its own, so that its
        // page cache is held to the budget (and the slack between two moves of the bound).
        m.follower = m.group.as_ref().map(|g| g.follow(self.sz.budget + SLACK));
        Ok(m)
    }

    /// Runs `f` on a mounted daemon; an error says why the daemon died if it did.
    pub(super) fn guarded<T>(
        m: &mut Mounted,
        what: &str,
        f: impl FnOnce(&Path) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        let mnt = m.mnt.clone();
        match f(&mnt) {
            Ok(t) => Ok(t),
            Err(e) => match m.died() {
                Some(why) => Err(e.context(format!("{what}: the daemon {why}"))),
                None => Err(e.context(what.to_string())),
            },
        }
    }

    /// Stops a daemon; keeps the most its memory group held, for a peer.
    pub(super) fn stop(&self, variant: &str, m: Mounted) -> anyhow::Result<()> {
        if let Some(p) = m.stop()? {
            let mut held = self.held.borrow_mut();
            let e = held.entry(variant.to_string()).or_default();
            e.own = e.own.max(p.own);
            e.cache = e.cache.max(p.cache);
        }
        Ok(())
    }

    pub(super) fn keep(&mut self, case: &'static str, variant: &'static str, value: f64) {
        self.seen.entry(case).or_default().insert(variant, value);
    }

    pub(super) fn variant(&mut self, b: &mut Bench, v: &'static str) -> anyhow::Result<()> {
        if v == "quire" && self.quire.as_ref().is_some_and(|q| !q.disk_tier) {
            b.note("quire: this quire mount has no disk tier (--disk-cache): warm-reread and warm-restart read from the network");
        }
        // Sequential: cold, warm, then after a restart on the same disk cache.
        let cache = self.cache_dir(v, "seq");
        b.step(&format!("cold-seq {v}"));
        let mut m = self.mount(v, &cache)?;
        let file = self.mnt.join("seq.dat");
        let cold = Self::guarded(&mut m, "cold-seq", |_| seq_read(&file))?;
        b.record("cold-seq", v, 1, "mb_per_s", cold, "MiB/s");
        self.keep("cold-seq", v, cold);
        b.step(&format!("warm-reread {v}"));
        let warm = Self::guarded(&mut m, "warm-reread", |_| seq_read(&file))?;
        b.record("warm-reread", v, 1, "mb_per_s", warm, "MiB/s");
        self.keep("warm-reread", v, warm);
        self.stop(v, m)?;
        b.step(&format!("warm-restart {v}"));
        drop_dir_cache(&cache)?;
        let t0 = Instant::now();
        let mut m = self.mount(v, &cache)?;
        Self::guarded(&mut m, "warm-restart", |_| seq_read(&file))?;
        let secs = t0.elapsed().as_secs_f64();
        b.record("warm-restart", v, 1, "seconds", secs, "s");
        self.keep("warm-restart", v, secs);
        self.stop(v, m)?;
        let _ = fs::remove_dir_all(&cache);

        // Listing, writing and Zipf reads on one fresh daemon.
        let cache = self.cache_dir(v, "rest");
        b.step(&format!("list {v}"));
        let mut m = self.mount(v, &cache)?;
        let want = self.sz.list;
        let per_s = Self::guarded(&mut m, "list", |mnt| list_per_s(mnt, want, false))?;
        b.record("list", v, 1, "objects_per_s", per_s, "1/s");
        self.keep("list", v, per_s);

        // `ls -l`: the names and every entry's attributes, a little over a second after the
        // names alone (longer than quire's kernel entry timeout; the peers keep their own
        // listings longer).
        b.step(&format!("list-long {v}"));
        std::thread::sleep(Duration::from_millis(1100));
        let per_s = Self::guarded(&mut m, "list-long", |mnt| list_per_s(mnt, want, true))?;
        b.record("list-long", v, 1, "objects_per_s", per_s, "1/s");
        self.keep("list-long", v, per_s);

        b.step(&format!("write-fsync {v}"));
        self.written += 1;
        let key = format!("written-{v}-{}.dat", self.written);
        let object = self.bucket.object(&key);
        let size = self.sz.write;
        let (closed, whole) = Self::guarded(&mut m, "write-fsync", |mnt| {
            write_fsync(&mnt.join(&key), &object, size)
        })?;
        let rate = size as f64 / (1 << 20) as f64 / whole;
        b.record("write-fsync", v, 1, "mb_per_s", rate, "MiB/s");
        self.keep("write-fsync", v, rate);
        if whole > closed * 1.2 + 0.05 {
            b.note(format!(
                "{v}: write-fsync: close returned after {closed:.2} s, the object was whole on the server after {whole:.2} s"
            ));
        }
        let _ = fs::remove_file(self.mnt.join(&key));

        b.step(&format!("zipf-randread {v}"));
        let file = self.mnt.join("zipf.dat");
        let (rt, ramp) = (self.sz.runtime, self.sz.ramp);
        let r = Self::guarded(&mut m, "zipf-randread", |_| {
            fio(
                &[
                    "--name=zipf-randread".into(),
                    format!("--filename={}", file.display()),
                    "--ioengine=psync".into(),
                    "--direct=1".into(),
                    format!("--numjobs={ZIPF_JOBS}"),
                    "--rw=randread".into(),
                    "--bs=4k".into(),
                    "--random_distribution=zipf:0.99".into(),
                    "--norandommap".into(),
                    "--time_based".into(),
                    format!("--runtime={rt}"),
                    format!("--ramp_time={ramp}"),
                ],
                None,
                false,
            )
        })?;
        b.record("zipf-randread", v, ZIPF_JOBS, "iops", r.iops, "1/s");
        b.record("zipf-randread", v, ZIPF_JOBS, "lat_us", r.lat_us, "us");
        b.record(
            "zipf-randread",
            v,
            ZIPF_JOBS,
            "daemon_rss_mib",
            rss(m.child.id()) as f64 / (1 << 20) as f64,
            "MiB",
        );
        self.keep("zipf-randread", v, r.iops);
        self.stop(v, m)?;
        let _ = fs::remove_dir_all(&cache);
        Ok(())
    }

    /// Declares each case's pair: the best peer ("before") against quire ("after"); prints
    /// quire's ratios against the issue's targets.
    pub(super) fn compare(&self, b: &mut Bench) {
        // (case, whether lower is better, the target ratio: against the best peer, but
        // cold-seq's against the link, where the best peer may already be near it)
        let cases: [(&str, bool, f64); 7] = [
            ("cold-seq", false, LINK_TARGET),
            ("warm-reread", false, 1.0),
            ("warm-restart", true, 1.0),
            ("list", false, 1.0),
            ("list-long", false, 1.0),
            ("write-fsync", false, 1.0),
            ("zipf-randread", false, 1.0),
        ];
        let mut lines = Vec::new();
        for (case, lower, target) in cases {
            let Some(by) = self.seen.get(case) else {
                continue;
            };
            let best = PEERS
                .iter()
                .filter_map(|p| by.get(p).map(|v| (*p, *v)))
                .reduce(|a, c| {
                    if (c.1 < a.1) == lower && c.1 != a.1 {
                        c
                    } else {
                        a
                    }
                });
            let Some((peer, pv)) = best else { continue };
            b.compare(case, peer, "quire");
            if let Some(q) = by.get("quire") {
                let ratio = if lower { pv / q } else { q / pv };
                let mut line = format!("{case}: quire {ratio:.2}× the best peer ({peer}");
                if case == "cold-seq" {
                    line.push_str(&format!(
                        "), {:.2}× the link ({:.1} MiB/s; target ≥ {target}×)",
                        q / link_mib_per_s(),
                        link_mib_per_s()
                    ));
                } else {
                    line.push_str(&format!("; target ≥ {target}×)"));
                }
                lines.push(line);
            }
        }
        for l in lines {
            b.note(l);
        }
    }
}

/// cold-seq's target: this share of the emulated link's bandwidth.
const LINK_TARGET: f64 = 0.9;

/// Lists the mount's `list` prefix (with `long`, each entry's attributes too, as `ls -l` does):
/// entries per second, after checking that all `want` were listed.
fn list_per_s(mnt: &Path, want: usize, long: bool) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let mut n = 0;
    for e in fs::read_dir(mnt.join("list"))? {
        let e = e?;
        if long {
            fs::symlink_metadata(e.path())?;
        }
        n += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    if n != want {
        bail!("listed {n} objects, not {want}");
    }
    Ok(n as f64 / secs)
}

/// Reads the whole file once in 1 MiB `O_DIRECT` reads, one at a time (fio); MiB/s over fio's
/// runtime.
pub(super) fn seq_read(file: &Path) -> anyhow::Result<f64> {
    let r = fio(
        &[
            "--name=seq".into(),
            format!("--filename={}", file.display()),
            "--ioengine=psync".into(),
            "--direct=1".into(),
            "--rw=read".into(),
            "--bs=1M".into(),
        ],
        None,
        false,
    )?;
    if r.runtime_s <= 0.0 || r.bytes <= 0.0 {
        bail!("fio read nothing of {}", file.display());
    }
    Ok(r.bytes / (1 << 20) as f64 / r.runtime_s)
}

/// Writes `size` bytes to a new file through the mount in 1 MiB writes, fsyncs and closes it,
/// then waits until the server's file `object` has every byte. Returns the seconds until the
/// close returned and until the object was whole.
pub(super) fn write_fsync(path: &Path, object: &Path, size: u64) -> anyhow::Result<(f64, f64)> {
    let mut x = 0x2545_F491_4F6C_DD1Du64 ^ size;
    let buf: Vec<u8> = (0..(1 << 20) / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect();
    let t0 = Instant::now();
    let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut left = size;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        f.write_all(&left.to_le_bytes())
            .and_then(|()| f.write_all(&buf[8..n]))
            .with_context(|| format!("writing {}", path.display()))?;
        left -= n as u64;
    }
    f.sync_all()
        .with_context(|| format!("fsync {}", path.display()))?;
    drop(f);
    let closed = t0.elapsed().as_secs_f64();
    loop {
        if fs::metadata(object).is_ok_and(|m| m.len() == size) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(600) {
            bail!("{} not whole on the server after 600 s", object.display());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok((closed, t0.elapsed().as_secs_f64()))
}

/// Drops the kernel's cached pages of every file under `dir` (a disk cache), so that a
/// restarted daemon reads its disk cache from the disk.
pub(super) fn drop_dir_cache(dir: &Path) -> anyhow::Result<()> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries {
        let e = e?;
        let t = e.file_type()?;
        if t.is_dir() {
            drop_dir_cache(&e.path())?;
        } else if t.is_file() {
            if let Ok(f) = File::open(e.path()) {
                drop_kernel_cache(&f)?;
            }
        }
    }
    Ok(())
}
