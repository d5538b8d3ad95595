//! Records what the `quire` binary was built from, for the host header of `quire bench`: the
//! compiler's version and the git commit of the sources (and whether they differed from it).
//! Both are taken at build time, so that a report names the build that measured it rather than
//! whatever toolchain or checkout is around when it runs.

use std::path::{Path, PathBuf};
use std::process::Command;

fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let version = output(Command::new(rustc).arg("--version")).unwrap_or_default();
    println!("cargo:rustc-env=QUIRE_BUILD_RUSTC={version}");

    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    // The workspace root: the sources whose state the commit stands for.
    let root = manifest.join("../..");
    let git = |args: &[&str]| output(Command::new("git").arg("-C").arg(&root).args(args));
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_default();
    // `--no-optional-locks`: a status that refreshed the index would change a file watched
    // below and make every build run this script again.
    let dirty = !commit.is_empty()
        && git(&[
            "--no-optional-locks",
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            "crates",
            "Cargo.toml",
            "Cargo.lock",
        ])
        .is_some_and(|s| !s.is_empty());
    println!("cargo:rustc-env=QUIRE_BUILD_COMMIT={commit}");
    println!("cargo:rustc-env=QUIRE_BUILD_DIRTY={dirty}");

    // Run again when the commit moves (HEAD, the branch refs) or the sources change.
    for p in ["Cargo.toml", "Cargo.lock"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    // Each crate's entries rather than `crates` whole (cargo scans a watched directory through):
    // a crate's own `target` (the query runner's, a workspace of its own) is build output, and a
    // build of it running alongside would make every build here run this script again.
    if let Ok(crates) = std::fs::read_dir(root.join("crates")) {
        for krate in crates.flatten() {
            match std::fs::read_dir(krate.path()) {
                Ok(entries) => entries
                    .flatten()
                    .filter(|e| e.file_name() != "target")
                    .for_each(|e| watch(&e.path())),
                Err(_) => watch(&krate.path()),
            }
        }
    }
    let rel = |p: Option<String>| {
        p.map(|p| {
            let p = PathBuf::from(p);
            if p.is_absolute() {
                p
            } else {
                root.join(p)
            }
        })
    };
    if let Some(dir) = rel(git(&["rev-parse", "--git-dir"])) {
        watch(&dir.join("HEAD"));
    }
    if let Some(dir) = rel(git(&["rev-parse", "--git-common-dir"])) {
        watch(&dir.join("refs/heads"));
        watch(&dir.join("packed-refs"));
    }
}

fn watch(p: &Path) {
    if p.exists() {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}
