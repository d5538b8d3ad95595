//! The server's objects, written straight into its directory with their ETag side-cars.

use super::*;

/// Base64, URL-safe alphabet, no padding (how the server names an object's side-cars).
pub(super) fn base64_url(bytes: &[u8]) -> String {
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

/// The server's directory: objects as files, and their ETags in side-cars.
pub(super) struct Bucket {
    pub(super) root: PathBuf,
}

impl Bucket {
    pub(super) fn object(&self, key: &str) -> PathBuf {
        self.root.join(BUCKET).join(key)
    }

    /// Records the object's ETag where the server looks for it (`internal.json` of
    /// `s3s-fs`), so that it never hashes the object on a request.
    pub(super) fn set_etag(&self, key: &str, etag: &str) -> anyhow::Result<()> {
        let side = self.root.join(format!(
            ".bucket-{}.object-{}.internal.json",
            base64_url(BUCKET.as_bytes()),
            base64_url(key.as_bytes())
        ));
        fs::write(&side, serde_json::json!({ "e_tag": etag }).to_string())
            .with_context(|| format!("writing {}", side.display()))
    }

    /// Writes an object of `size` bytes of a fixed pseudo-random pattern, and its ETag (the
    /// MD5 of the content, by `md5sum`, as the server computes it for a single PUT).
    pub(super) fn put_large(&self, key: &str, size: u64) -> anyhow::Result<()> {
        let path = self.object(key);
        let mut f = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ size;
        let buf: Vec<u8> = (0..(1 << 20) / 8)
            .flat_map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()
            })
            .collect();
        let mut left = size;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            // Every MiB differs, so that no client can deduplicate.
            f.write_all(&(left.to_le_bytes()))?;
            f.write_all(&buf[8..n])?;
            left -= n as u64;
        }
        f.sync_all()?;
        drop(f);
        let etag = md5(&path)?;
        self.set_etag(key, &etag)
    }

    /// `n` small objects under `prefix/`, all with the same content and ETag.
    pub(super) fn put_many(&self, prefix: &str, n: usize) -> anyhow::Result<()> {
        let dir = self.object(prefix);
        fs::create_dir_all(&dir)?;
        let body = b"quire object listing\n";
        let first = dir.join("o00000");
        fs::write(&first, body)?;
        let etag = md5(&first)?;
        for i in 0..n {
            let key = format!("{prefix}/o{i:05}");
            if i > 0 {
                fs::write(self.object(&key), body)?;
            }
            self.set_etag(&key, &etag)?;
        }
        Ok(())
    }
}

pub(super) fn md5(path: &Path) -> anyhow::Result<String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_url_matches_the_servers_names() {
        // `printf bench | base64`, `printf seq.dat | base64`, URL-safe, unpadded.
        assert_eq!(base64_url(b"bench"), "YmVuY2g");
        assert_eq!(base64_url(b"seq.dat"), "c2VxLmRhdA");
        assert_eq!(base64_url(b"list/o00001"), "bGlzdC9vMDAwMDE");
        assert_eq!(base64_url(b"\xfb\xff"), "-_8");
        assert_eq!(base64_url(b""), "");
    }
}
