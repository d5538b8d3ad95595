//! The project's S3 server with the TPC-H tables in its bucket, behind `quire-s3-proxy` and its
//! emulated link; the proxy's counters.
//!
//! The server (`quire-s3-server`, objects as plain files under a directory) serves
//! [`data_root`]: the bucket [`BUCKET`] is its directory `bench/`, and the tables of scale
//! factor F are the objects `sfF/<table>.parquet`, written there once by [`prepare`] with the
//! ETag side-car the server reads (the MD5 of the content, by `md5sum`), so that nothing is
//! uploaded or hashed again on later runs. Clients reach it only through the proxy, which adds
//! [`DELAY_MS`] to every request and caps all response bodies together at
//! [`BANDWIDTH_MBPS`] — the link of the `object` suite.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

// One finder for the S3 tools, shared with the `quire` binary's benchmark and quire-object's
// tests.
#[path = "../../quire-cli/src/s3_tools.rs"]
#[allow(dead_code)]
mod s3_tools;

pub use s3_tools::S3Tools;

/// The bucket.
pub const BUCKET: &str = "bench";
/// The server's credentials.
pub const ACCESS_KEY: &str = "quire";
pub const SECRET_KEY: &str = "quire-secret";
/// The emulated link: a delay per request, one bandwidth cap for all responses.
pub const DELAY_MS: f64 = 2.0;
pub const BANDWIDTH_MBPS: f64 = 1000.0;

/// The S3 tools, found or built (see `s3_tools`), or why they cannot be had.
pub fn tools() -> Result<S3Tools, String> {
    s3_tools::find()
}

/// The target directory of the running executable (`…/target`), where the data is kept.
pub fn target_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent().context("the executable has no directory")?;
    // target/<profile>/ or target/<profile>/deps/ or target/<profile>/examples/
    if dir
        .file_name()
        .is_some_and(|n| n == "deps" || n == "examples")
    {
        dir = dir.parent().unwrap_or(dir);
    }
    Ok(dir.parent().unwrap_or(dir).to_path_buf())
}

/// The server's directory: `$QUIRE_QUERY_DATA`, else `<target>/query-data`.
pub fn data_root() -> anyhow::Result<PathBuf> {
    match std::env::var_os("QUIRE_QUERY_DATA") {
        Some(d) => Ok(PathBuf::from(d)),
        None => Ok(target_dir()?.join("query-data")),
    }
}

/// The key prefix of scale factor `sf`'s tables.
pub fn prefix(sf: f64) -> String {
    crate::tpch::sf_name(sf)
}

/// Makes the tables of `sf` in the bucket's directory under `root` (once) with their ETag
/// side-cars. Returns the seconds it took (0 where they were there).
pub fn prepare(root: &Path, sf: f64) -> anyhow::Result<f64> {
    let t0 = Instant::now();
    let dir = root.join(BUCKET).join(prefix(sf));
    if dir.join(crate::tpch::DONE).is_file() {
        return Ok(0.0);
    }
    eprintln!(
        "making TPC-H SF {sf} as Parquet in {} (once)",
        dir.display()
    );
    crate::tpch::generate(&dir, sf)?;
    for table in crate::tpch::TABLES {
        let key = format!("{}/{table}.parquet", prefix(sf));
        set_etag(root, &key, &md5(&root.join(BUCKET).join(&key))?)?;
    }
    set_etag(
        root,
        &format!("{}/{}", prefix(sf), crate::tpch::DONE),
        &md5(&dir.join(crate::tpch::DONE))?,
    )?;
    Ok(t0.elapsed().as_secs_f64())
}

/// Base64, URL-safe alphabet, no padding (how the server names an object's side-cars).
fn base64_url(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut s = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            s.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    s
}

/// Records an object's ETag where the server looks for it (`internal.json` of `s3s-fs`).
fn set_etag(root: &Path, key: &str, etag: &str) -> anyhow::Result<()> {
    let side = root.join(format!(
        ".bucket-{}.object-{}.internal.json",
        base64_url(BUCKET.as_bytes()),
        base64_url(key.as_bytes())
    ));
    fs::write(&side, serde_json::json!({ "e_tag": etag }).to_string())
        .with_context(|| format!("writing {}", side.display()))
}

fn md5(path: &Path) -> anyhow::Result<String> {
    let out = Command::new("md5sum")
        .arg(path)
        .output()
        .context("running md5sum")?;
    if !out.status.success() {
        bail!("md5sum {} failed", path.display());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.split_whitespace().next().unwrap_or_default();
    if hex.len() != 32 {
        bail!("md5sum printed {text:?}");
    }
    Ok(hex.to_string())
}

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_port(child: &mut Child, file: &Path, what: &str, log: &Path) -> anyhow::Result<u16> {
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
pub fn tail(log: &Path) -> String {
    let text = fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}

fn spawn_logged(cmd: &mut Command, log: &Path) -> anyhow::Result<Child> {
    let out = File::create(log)?;
    let err = out.try_clone()?;
    cmd.stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {:?}", cmd.get_program()))
}

/// The server over `root` and the proxy in front of it; both stop when this is dropped.
pub struct Network {
    _server: Proc,
    _proxy: Proc,
    server_port: u16,
    port: u16,
    control_port: u16,
}

impl Network {
    /// Starts the server over `root` (holding the bucket's directory) and the proxy with the
    /// emulated link; their logs and port files go to `dir`.
    pub fn start(tools: &S3Tools, root: &Path, dir: &Path) -> anyhow::Result<Network> {
        fs::create_dir_all(root.join(BUCKET))?;
        let (sport, slog) = (dir.join("server.port"), dir.join("server.log"));
        let _ = fs::remove_file(&sport);
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
        let _ = fs::remove_file(&pport);
        let _ = fs::remove_file(&cport);
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
        let control_port = wait_port(&mut proxy, &cport, "quire-s3-proxy's control", &plog)?;
        Ok(Network {
            _server: server,
            _proxy: Proc(proxy),
            server_port,
            port,
            control_port,
        })
    }

    /// The proxy: every client's endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The server itself, without the emulated link.
    pub fn server_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.server_port)
    }

    /// The proxy's control endpoint (its counters).
    pub fn control(&self) -> String {
        format!("127.0.0.1:{}", self.control_port)
    }
}

/// The tables of one scale factor served behind the proxy, for an example or a test: the
/// network and its scratch directory, both gone when this is dropped.
pub struct Served {
    pub net: Network,
    /// The tables' key prefix (`sf0.01`).
    pub prefix: String,
    pub scratch: tempfile::TempDir,
}

/// Serves the tables of `sf` (made once), or `None` after printing "skipped: why" where the S3
/// tools cannot be had — an error instead under `QUIRE_REQUIRE_S3=1`, which says they must.
pub fn serve(sf: f64) -> anyhow::Result<Option<Served>> {
    let tools = match tools() {
        Ok(t) => t,
        Err(why) => {
            if std::env::var("QUIRE_REQUIRE_S3").as_deref() == Ok("1") {
                bail!("{why}; QUIRE_REQUIRE_S3=1 says the S3 server must run");
            }
            println!("skipped: {why}");
            return Ok(None);
        }
    };
    let root = data_root()?;
    prepare(&root, sf)?;
    let scratch = tempfile::Builder::new().prefix("quire-query-").tempdir()?;
    let net = Network::start(&tools, &root, scratch.path())?;
    Ok(Some(Served {
        net,
        prefix: prefix(sf),
        scratch,
    }))
}

/// What went through the proxy so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyCount {
    /// GET requests (object reads and listings).
    pub gets: u64,
    /// All requests.
    pub requests: u64,
    /// Response body bytes.
    pub bytes: u64,
}

impl ProxyCount {
    /// The counts between `earlier` and `self`.
    pub fn since(self, earlier: ProxyCount) -> ProxyCount {
        ProxyCount {
            gets: self.gets.saturating_sub(earlier.gets),
            requests: self.requests.saturating_sub(earlier.requests),
            bytes: self.bytes.saturating_sub(earlier.bytes),
        }
    }
}

/// The proxy's counters, from `GET /stats` on its control endpoint `control` (host:port).
pub fn proxy_count(control: &str) -> anyhow::Result<ProxyCount> {
    let mut s = TcpStream::connect(control).with_context(|| format!("connecting {control}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET /stats HTTP/1.1\r\nHost: {control}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .context("the proxy's answer has no body")?;
    let v: serde_json::Value = serde_json::from_str(body.trim())
        .with_context(|| format!("the proxy's /stats: {body:?}"))?;
    Ok(ProxyCount {
        gets: v["by_method"]["GET"].as_u64().unwrap_or(0),
        requests: v["requests"].as_u64().unwrap_or(0),
        bytes: v["response_body_bytes"].as_u64().unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_url_matches_the_servers_names() {
        assert_eq!(base64_url(b"bench"), "YmVuY2g");
        assert_eq!(base64_url(b"seq.dat"), "c2VxLmRhdA");
        assert_eq!(base64_url(b"\xfb\xff"), "-_8");
    }
}
