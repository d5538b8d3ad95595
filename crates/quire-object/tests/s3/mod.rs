//! The project's S3 server (`tools/s3-server`: `quire-s3-server` on s3s-fs, and the delaying,
//! fault-injecting `quire-s3-proxy`), started on 127.0.0.1 for a test.
//!
//! The binaries are found, or built on first use, by `s3_tools` (`$QUIRE_S3_TOOLS`, then the
//! test's own target directory). Where they cannot be had a test prints "skipped: why" —
//! unless `QUIRE_REQUIRE_S3=1` (as `.ci/run` sets), where it fails.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// One finder for the S3 tools, shared with the `quire` binary's benchmark, which carries it.
#[path = "../../../quire-cli/src/s3_tools.rs"]
mod s3_tools;

pub const KEY: &str = "quire";
pub const SECRET: &str = "quire-secret";
pub const BUCKET: &str = "bucket";

fn wait_port(file: &Path, child: &mut Child) -> u16 {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(file) {
            if let Ok(p) = s.trim().parse() {
                return p;
            }
        }
        if let Ok(Some(st)) = child.try_wait() {
            panic!("the server exited at start: {st}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no port in {file:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A server over a temporary directory holding one bucket, [`BUCKET`].
pub struct Server {
    pub root: tempfile::TempDir,
    pub port: u16,
    child: Option<Child>,
    bin: PathBuf,
}

impl Server {
    pub fn start() -> Option<Server> {
        let bin = s3_tools::for_test()?.server;
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(BUCKET)).unwrap();
        let mut s = Server {
            root,
            port: 0,
            child: None,
            bin,
        };
        s.spawn(0);
        Some(s)
    }

    /// The server's command on `port` (0: any), writing its port to `port_file`.
    fn command(&self, port: u16, port_file: &Path) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--root")
            .arg(self.root.path())
            .arg("--addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--port-file")
            .arg(port_file)
            .arg("--access-key")
            .arg(KEY)
            .arg("--secret-key")
            .arg(SECRET)
            .stdout(Stdio::null());
        c
    }

    fn spawn(&mut self, port: u16) {
        let pf = self.root.path().join(".port");
        let _ = std::fs::remove_file(&pf);
        let mut child = self
            .command(port, &pf)
            .spawn()
            .expect("start quire-s3-server");
        self.port = wait_port(&pf, &mut child);
        self.child = Some(child);
    }

    /// Stops the server (its objects stay in its directory).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and directory.
    pub fn restart(&mut self) {
        self.stop();
        let port = self.port;
        let start = Instant::now();
        loop {
            // The port may linger a moment after the kill.
            let pf = self.root.path().join(".port");
            let _ = std::fs::remove_file(&pf);
            let mut child = self
                .command(port, &pf)
                .stderr(Stdio::null())
                .spawn()
                .expect("restart quire-s3-server");
            std::thread::sleep(Duration::from_millis(100));
            if child.try_wait().unwrap().is_none() {
                self.port = wait_port(&pf, &mut child);
                self.child = Some(child);
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "port {port} stays taken"
            );
        }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The file an object is kept in.
    pub fn object_path(&self, key: &str) -> PathBuf {
        self.root.path().join(BUCKET).join(key)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The proxy in front of a server.
pub struct Proxy {
    pub port: u16,
    pub control: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Proxy {
    pub fn start(upstream: u16, delay_ms: u64) -> Option<Proxy> {
        let bin = s3_tools::for_test()?.proxy;
        let dir = tempfile::tempdir().unwrap();
        let pf = dir.path().join("port");
        let cf = dir.path().join("control");
        let mut child = Command::new(bin)
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--upstream")
            .arg(format!("127.0.0.1:{upstream}"))
            .arg("--delay-ms")
            .arg(delay_ms.to_string())
            .arg("--port-file")
            .arg(&pf)
            .arg("--control-port-file")
            .arg(&cf)
            .stdout(Stdio::null())
            .spawn()
            .expect("start quire-s3-proxy");
        let port = wait_port(&pf, &mut child);
        let control = wait_port(&cf, &mut child);
        Some(Proxy {
            port,
            control,
            child,
            _dir: dir,
        })
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Sends a control request: `POST /fault?mode=…&count=…`.
    pub fn fault(&self, mode: &str, count: u32) {
        self.fault_on(mode, count, "");
    }

    /// As [`Proxy::fault`], for the requests `filter` picks (`&method=POST&query=uploadId`).
    pub fn fault_on(&self, mode: &str, count: u32, filter: &str) {
        let body =
            self.control_request("POST", &format!("/fault?mode={mode}&count={count}{filter}"));
        assert!(body.starts_with("HTTP/1.1 2"), "control answered {body}");
    }

    fn control_request(&self, method: &str, path: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.control)).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `object_store` options for the server at `endpoint` with `secret`.
pub fn options(endpoint: &str, secret: &str) -> Vec<(String, String)> {
    [
        ("aws_endpoint", endpoint),
        ("aws_access_key_id", KEY),
        ("aws_secret_access_key", secret),
        ("aws_region", "us-east-1"),
        ("aws_allow_http", "true"),
        ("aws_virtual_hosted_style_request", "false"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}
