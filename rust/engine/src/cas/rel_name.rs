//! `RelName`: a blob's name relative to `blobs/` (or `exec/`), `<hh>/<sha256>-<size>`,
//! built on the stack as a C string (it is made once per staged file, so no allocation).

use crate::digest::Digest;

/// `<hh>/<sha256>-<size>\0`: a blob's (or exec twin's) name relative to `blobs/` (`exec/`),
/// built on the stack: it is made once per staged file.
pub(crate) struct RelName {
    buf: [u8; 2 + 1 + 64 + 1 + 20 + 1],
    len: usize,
    /// The shard, `<hh>` as a number (the hash's first byte).
    pub(super) shard: u8,
}

impl RelName {
    pub(crate) fn new(d: &Digest) -> RelName {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut buf = [0u8; 89];
        for (i, b) in d.hash.iter().enumerate() {
            buf[3 + 2 * i] = HEX[(b >> 4) as usize];
            buf[4 + 2 * i] = HEX[(b & 15) as usize];
        }
        buf[0] = buf[3];
        buf[1] = buf[4];
        buf[2] = b'/';
        buf[67] = b'-';
        let mut len = 68;
        let (digits, first) = itoa_buf(d.size);
        let n = digits.len() - first;
        buf[len..len + n].copy_from_slice(&digits[first..]);
        len += n;
        buf[len] = 0;
        RelName {
            buf,
            len: len + 1,
            shard: d.hash[0],
        }
    }

    pub(crate) fn as_cstr(&self) -> &std::ffi::CStr {
        std::ffi::CStr::from_bytes_with_nul(&self.buf[..self.len]).expect("one trailing NUL")
    }

    /// `<sha256>-<size>`: the name inside its shard directory.
    pub(crate) fn leaf(&self) -> &std::ffi::CStr {
        std::ffi::CStr::from_bytes_with_nul(&self.buf[3..self.len]).expect("one trailing NUL")
    }
}

/// Decimal digits of `n`, right-aligned: (buffer, index of the first digit).
fn itoa_buf(mut n: u64) -> ([u8; 20], usize) {
    let mut b = [0u8; 20];
    let mut i = 20;
    loop {
        i -= 1;
        b[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return (b, i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cas::Cache;

    #[test]
    fn rel_name_matches_the_sharded_path() {
        let c = tempfile::tempdir().unwrap();
        let cache = Cache::open(c.path()).unwrap();
        for data in [&b"x"[..], &[7u8; 12345][..], &vec![1u8; 10_000_000][..]] {
            let d = Digest::of_bytes(data);
            let want = cache.blob_path(&d);
            let want = want.strip_prefix(cache.root().join("blobs")).unwrap();
            assert_eq!(
                RelName::new(&d).as_cstr().to_str().unwrap(),
                want.to_str().unwrap()
            );
        }
    }
}
