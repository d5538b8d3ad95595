//! Where the project's S3 test server and proxy (`quire-s3-server`, `quire-s3-proxy`: the
//! workspace's package `quire-s3-tools`, in `tools/s3-server`) are found, built on first use.
//!
//! In order:
//! 1. `$QUIRE_S3_TOOLS`, a directory holding both binaries, where it is set and holds them;
//! 2. the running executable's own profile directory in its target directory
//!    (`target/<profile>/`, found from [`std::env::current_exe`]), where `cargo test
//!    --workspace` and `cargo build --workspace` put them;
//! 3. otherwise they are built there, once per process, with `$CARGO build -p quire-s3-tools
//!    --bins` in the executable's profile, into the same target directory. `cargo test` and
//!    `cargo run` release their lock on the target directory before they run what they built,
//!    so the nested build does not wait on the outer one.
//!
//! One file, compiled into the `quire` binary (the `object` benchmark) and, by `#[path]`, into
//! the tests that start the server (`quire-cli`'s and `quire-object`'s): the binary needs it in
//! its own package, and tests are not built from packages.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The server and the proxy.
#[derive(Clone, Debug)]
pub struct S3Tools {
    pub server: PathBuf,
    pub proxy: PathBuf,
}

const SERVER: &str = "quire-s3-server";
const PROXY: &str = "quire-s3-proxy";
const PACKAGE: &str = "quire-s3-tools";

impl S3Tools {
    /// Both binaries in `dir`, if both are there.
    fn in_dir(dir: &Path) -> Option<S3Tools> {
        let (server, proxy) = (dir.join(SERVER), dir.join(PROXY));
        (server.is_file() && proxy.is_file()).then_some(S3Tools { server, proxy })
    }
}

/// The binaries, found or built (see the module's documentation), or why they cannot be had.
pub fn find() -> Result<S3Tools, String> {
    static FOUND: OnceLock<Result<S3Tools, String>> = OnceLock::new();
    FOUND.get_or_init(find_or_build).clone()
}

/// For a test: the binaries, or `None` after printing "skipped: why"; a panic instead under
/// `QUIRE_REQUIRE_S3=1`, which says the S3 tests must run.
#[allow(dead_code)] // the benchmark's build does not use it
pub fn for_test() -> Option<S3Tools> {
    match find() {
        Ok(t) => Some(t),
        Err(why) => {
            if std::env::var("QUIRE_REQUIRE_S3").as_deref() == Ok("1") {
                panic!("{why}; QUIRE_REQUIRE_S3=1 says the S3 tests must run");
            }
            eprintln!("skipped: {why}");
            None
        }
    }
}

fn find_or_build() -> Result<S3Tools, String> {
    if let Some(d) = std::env::var_os("QUIRE_S3_TOOLS") {
        if let Some(t) = S3Tools::in_dir(Path::new(&d)) {
            return Ok(t);
        }
    }
    let profile_dir = profile_dir()?;
    if let Some(t) = S3Tools::in_dir(&profile_dir) {
        return Ok(t);
    }
    build(&profile_dir)?;
    S3Tools::in_dir(&profile_dir).ok_or_else(|| {
        format!(
            "cargo built {PACKAGE} but {SERVER} and {PROXY} are not in {}",
            profile_dir.display()
        )
    })
}

/// `target/<profile>` of the running executable: its directory, or the one above `deps/`
/// (where cargo puts test binaries).
fn profile_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("no path to this executable: {e}"))?;
    let dir = exe
        .parent()
        .ok_or_else(|| format!("{} has no directory", exe.display()))?;
    Ok(if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().unwrap_or(dir).to_path_buf()
    } else {
        dir.to_path_buf()
    })
}

/// Builds the binaries into `profile_dir` (`<target>/<profile>`) from this source tree's
/// workspace.
fn build(profile_dir: &Path) -> Result<(), String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../Cargo.toml");
    let member = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/s3-server/Cargo.toml");
    if !member.is_file() {
        return Err(format!(
            "{SERVER} and {PROXY} are not in {} and there is no source tree to build them from \
             ({} is missing); set QUIRE_S3_TOOLS to a directory holding them",
            profile_dir.display(),
            member.display()
        ));
    }
    let (Some(name), Some(target_dir)) = (profile_dir.file_name(), profile_dir.parent()) else {
        return Err(format!(
            "{} is not a target directory",
            profile_dir.display()
        ));
    };
    // The directory of cargo's `dev` profile is `debug`; the others are named as their profile.
    let profile = if name == "debug" {
        "dev".into()
    } else {
        name.to_string_lossy().into_owned()
    };
    // Cargo sets CARGO for the processes it runs (tests, `cargo run`).
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!(
        "building {SERVER} and {PROXY} (profile {profile}) into {}: first use",
        profile_dir.display()
    );
    let status = Command::new(&cargo)
        .arg("build")
        .arg("--manifest-path")
        .arg(&manifest)
        .args(["-p", PACKAGE, "--bins", "--profile", &profile])
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", Path::new(&cargo).display()))?;
    if !status.success() {
        return Err(format!(
            "`cargo build -p {PACKAGE} --bins --profile {profile}` failed ({status})"
        ));
    }
    Ok(())
}
