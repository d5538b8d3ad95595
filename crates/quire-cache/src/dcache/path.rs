//! Names and paths: splitting a path into components, checking a single name, hashing a name.
//!
//! Paths are byte strings (Unix paths are not UTF-8). A path is split on `/`; empty components
//! (from `a//b`, a leading `/` or a trailing `/`) are skipped, `.` and `..` are left to the walk.
//! A name — one component — is never empty, `.` or `..`, and never holds `/` or NUL.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use super::DcacheError;

/// The hash of a name, used with the parent's address to pick a hash bucket and to reject most
/// non-matching entries before their bytes are compared. A multiply-rotate hash over 8-byte
/// words (in the manner of FxHash): names are short and the hash runs on every component of
/// every walk, so it must be cheap; the table's bucket index mixes it again with the parent.
#[inline]
pub(crate) fn hash_name(name: &[u8]) -> u64 {
    hash_and_nul(name).0
}

/// The hash of a path component as [`hash_name`] computes it, or `None` if the component holds
/// a NUL byte — found in the same pass, so that the lock-free walk need not scan the path first.
#[inline]
pub(crate) fn hash_component(name: &[u8]) -> Option<u64> {
    match hash_and_nul(name) {
        (h, false) => Some(h),
        (_, true) => None,
    }
}

#[inline(always)]
fn hash_and_nul(name: &[u8]) -> (u64, bool) {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    // `(w - LO) & !w & HI` is non-zero exactly when a byte of `w` is zero.
    let mut zero = 0u64;
    let mut h: u64 = name.len() as u64;
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("chunk of 8"));
        zero |= w.wrapping_sub(LO) & !w & HI;
        h = (h.rotate_left(5) ^ w).wrapping_mul(K);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rest.len()].copy_from_slice(rest);
        let w = u64::from_le_bytes(buf);
        // The padding bytes are set for the NUL test only.
        let padded = w | (u64::MAX << (8 * rest.len()));
        zero |= padded.wrapping_sub(LO) & !padded & HI;
        h = (h.rotate_left(5) ^ w).wrapping_mul(K);
    }
    (h ^ (h >> 29), zero != 0)
}

/// The non-empty components of a path, in order.
pub(crate) struct Components<'p> {
    path: &'p [u8],
    pos: usize,
}

impl<'p> Components<'p> {
    pub(crate) fn new(path: &'p [u8]) -> Self {
        Components { path, pos: 0 }
    }

    /// Whether no component is left after the ones already returned.
    #[inline]
    pub(crate) fn is_done(&self) -> bool {
        self.path[self.pos..].iter().all(|&b| b == b'/')
    }
}

impl<'p> Iterator for Components<'p> {
    type Item = &'p [u8];

    #[inline]
    fn next(&mut self) -> Option<&'p [u8]> {
        let p = self.path;
        while self.pos < p.len() && p[self.pos] == b'/' {
            self.pos += 1;
        }
        if self.pos == p.len() {
            return None;
        }
        let start = self.pos;
        while self.pos < p.len() && p[self.pos] != b'/' {
            self.pos += 1;
        }
        Some(&p[start..self.pos])
    }
}

/// Whether the path ends in `/` (so its last component must be a directory).
#[inline]
pub(crate) fn has_trailing_slash(path: &[u8]) -> bool {
    path.len() > 1 && path.last() == Some(&b'/')
}

/// Checks one name: non-empty, not `.` or `..`, no `/`, no NUL.
pub(crate) fn check_name(name: &OsStr) -> Result<&[u8], DcacheError> {
    let b = name.as_bytes();
    if b.is_empty() || b == b"." || b == b".." || b.contains(&b'/') || b.contains(&0) {
        return Err(DcacheError::InvalidName {
            name: name.to_os_string(),
        });
    }
    Ok(b)
}

/// Checks a whole path: non-empty, no NUL.
pub(crate) fn check_path(path: &OsStr) -> Result<&[u8], DcacheError> {
    let b = path.as_bytes();
    if b.is_empty() {
        return Err(DcacheError::EmptyPath);
    }
    if b.contains(&0) {
        return Err(DcacheError::InvalidName {
            name: path.to_os_string(),
        });
    }
    Ok(b)
}

/// Splits a path that names an object to create, remove or rename into the path of its parent
/// directory (possibly empty: the root) and its last name. Trailing slashes are ignored.
pub(crate) fn split_last(path: &OsStr) -> Result<(&[u8], &OsStr), DcacheError> {
    let b = check_path(path)?;
    let mut end = b.len();
    while end > 0 && b[end - 1] == b'/' {
        end -= 1;
    }
    let start = b[..end]
        .iter()
        .rposition(|&c| c == b'/')
        .map_or(0, |i| i + 1);
    let name = OsStr::from_bytes(&b[start..end]);
    check_name(name)?;
    Ok((&b[..start], name))
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn comps(p: &str) -> Vec<&str> {
        Components::new(p.as_bytes())
            .map(|c| std::str::from_utf8(c).unwrap())
            .collect()
    }

    #[test]
    fn components_skip_empty() {
        assert_eq!(comps("a/b/c"), ["a", "b", "c"]);
        assert_eq!(comps("//a//b/"), ["a", "b"]);
        assert_eq!(comps("/"), Vec::<&str>::new());
        assert_eq!(comps("./../x"), [".", "..", "x"]);
        let mut it = Components::new(b"a/b//");
        assert!(!it.is_done());
        it.next();
        assert!(!it.is_done());
        it.next();
        assert!(it.is_done());
    }

    #[test]
    fn names_are_checked() {
        for bad in ["", ".", "..", "a/b", "a\0b", "/"] {
            assert!(
                matches!(
                    check_name(OsStr::new(bad)),
                    Err(DcacheError::InvalidName { .. })
                ),
                "{bad:?}"
            );
        }
        for good in ["a", "...", ".a", "a b", "é"] {
            assert_eq!(check_name(OsStr::new(good)).unwrap(), good.as_bytes());
        }
        assert_eq!(check_path(OsStr::new("")), Err(DcacheError::EmptyPath));
        assert!(check_path(OsStr::new("a\0")).is_err());
    }

    #[test]
    fn split_last_finds_parent_and_name() {
        let s = |p: &str| {
            split_last(OsStr::new(p))
                .map(|(d, n)| (std::str::from_utf8(d).unwrap().to_string(), n.to_owned()))
        };
        assert_eq!(s("a/b/c").unwrap(), ("a/b/".into(), "c".into()));
        assert_eq!(s("c").unwrap(), ("".into(), "c".into()));
        assert_eq!(s("/c/").unwrap(), ("/".into(), "c".into()));
        assert!(matches!(s("/"), Err(DcacheError::InvalidName { .. })));
        assert!(matches!(s("a/.."), Err(DcacheError::InvalidName { .. })));
        assert_eq!(s(""), Err(DcacheError::EmptyPath));
    }

    #[test]
    fn hash_spreads_short_names() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..10_000 {
            seen.insert(hash_name(format!("f{i}").as_bytes()));
        }
        assert_eq!(seen.len(), 10_000);
        assert_ne!(hash_name(b"ab"), hash_name(b"ba"));
        assert_ne!(hash_name(b"a"), hash_name(b"a\0"));
    }

    #[test]
    fn hash_component_finds_every_nul() {
        for len in 1..=20 {
            let clean: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            assert_eq!(hash_component(&clean), Some(hash_name(&clean)), "{len}");
            let mut high = clean.clone();
            high.iter_mut().for_each(|b| *b |= 0x80);
            assert_eq!(hash_component(&high), Some(hash_name(&high)), "{len}");
            for at in 0..len {
                let mut bad = clean.clone();
                bad[at] = 0;
                assert_eq!(hash_component(&bad), None, "{len} {at}");
                // A byte of 0x01 before a 0x80 must not read as a zero byte.
                let mut tricky = high.clone();
                tricky[at] = 1;
                assert!(hash_component(&tricky).is_some(), "{len} {at}");
            }
        }
    }
}
