//! quire's S3-protocol test server and its delaying / fault-injecting proxy.
//!
//! Both are also usable in-process (tests): [`server::start`] and
//! [`proxy::start`]. See README.md.

pub mod proxy;
pub mod server;

use std::path::Path;

use anyhow::Context as _;

/// Write `port` to `path` atomically (write a temporary file, then rename),
/// so a reader polling for the file never sees it half written.
pub fn write_port_file(path: &Path, port: u16) -> anyhow::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, format!("{port}\n"))
        .with_context(|| format!("cannot write {}", Path::new(&tmp).display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}
