//! REAPI digests: SHA-256 hex plus size, written `<hash>/<size>` on the command line, and
//! `BadDigest`, the one error parsing one can give (a leaf: `error.rs` names `Digest` and turns
//! a `BadDigest` into `Error::InvalidArgument`, so this file imports nothing from it).

use bazel_remote_apis::build::bazel::remote::execution::v2 as pb;
use sha2::{Digest as _, Sha256};
use std::fmt;
use std::io::Read;

/// A digest a client or a file spelled wrong; its text says what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid argument: {0}")]
pub struct BadDigest(pub String);

type Result<T> = std::result::Result<T, BadDigest>;

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    pub hash: [u8; 32],
    pub size: u64,
}

impl Digest {
    /// SHA-256 of the empty string: never stored, always "present".
    pub const EMPTY: Digest = Digest {
        hash: [
            0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f,
            0xb9, 0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b,
            0x78, 0x52, 0xb8, 0x55,
        ],
        size: 0,
    };

    pub fn of_bytes(data: &[u8]) -> Digest {
        Digest {
            hash: Sha256::digest(data).into(),
            size: data.len() as u64,
        }
    }

    /// Hash everything `r` yields.
    pub fn of_reader(mut r: impl Read) -> std::io::Result<Digest> {
        let mut h = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut size = 0u64;
        loop {
            let n = match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            h.update(&buf[..n]);
            size += n as u64;
        }
        Ok(Digest {
            hash: h.finalize().into(),
            size,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    pub fn hex(&self) -> String {
        hex::encode(self.hash)
    }

    /// Parse `<64 hex>/<size>`.
    pub fn parse(s: &str) -> Result<Digest> {
        let (h, size) = s
            .split_once('/')
            .ok_or_else(|| BadDigest(format!("digest '{s}' is not <sha256>/<size>")))?;
        let size: u64 = size
            .parse()
            .map_err(|_| BadDigest(format!("digest '{s}': bad size")))?;
        Self::from_parts(h, size as i64)
    }

    pub fn from_parts(hash_hex: &str, size: i64) -> Result<Digest> {
        if size < 0 {
            return Err(BadDigest(format!(
                "digest {hash_hex}: negative size {size}"
            )));
        }
        let Some(hash) = decode_lower_hex(hash_hex.as_bytes()) else {
            return Err(BadDigest(format!(
                "digest hash '{hash_hex}' is not 64 lowercase hex digits"
            )));
        };
        let d = Digest {
            hash,
            size: size as u64,
        };
        if d.size == 0 && d != Digest::EMPTY {
            return Err(BadDigest(format!(
                "digest {d}: size 0 but not the empty blob's hash"
            )));
        }
        Ok(d)
    }

    pub fn from_proto(p: &pb::Digest) -> Result<Digest> {
        Self::from_parts(&p.hash, p.size_bytes)
    }

    /// Like `from_proto`, but a missing digest field is an error naming `what`.
    pub fn from_opt_proto(p: Option<&pb::Digest>, what: &str) -> Result<Digest> {
        match p {
            Some(p) => Self::from_proto(p),
            None => Err(BadDigest(format!("{what}: digest missing"))),
        }
    }

    pub fn to_proto(&self) -> pb::Digest {
        pb::Digest {
            hash: self.hex(),
            size_bytes: self.size as i64,
        }
    }

    /// File name used in cache directories: `<hex>-<size>`.
    pub fn file_name(&self) -> String {
        format!("{}-{}", self.hex(), self.size)
    }

    pub fn from_file_name(name: &str) -> Option<Digest> {
        let (h, s) = name.split_once('-')?;
        Self::from_parts(h, s.parse().ok()?).ok()
    }
}

/// Nibble values of lowercase hex digits; 0xff for every other byte.
const HEX_VALUE: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// 64 lowercase hex digits to 32 bytes. Staging parses one digest per input file, so this is
/// a table lookup per digit with one check at the end (the `hex` crate's per-digit error
/// handling cost ~5% of a cold stage).
fn decode_lower_hex(s: &[u8]) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    let mut bad = 0u8;
    for (o, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
        let (hi, lo) = (HEX_VALUE[pair[0] as usize], HEX_VALUE[pair[1] as usize]);
        bad |= hi | lo;
        *o = (hi << 4) | (lo & 0x0f);
    }
    (bad & 0xf0 == 0).then_some(out)
}

/// The empty blob's digest (what a `StageRequest` or a message without one starts from).
impl Default for Digest {
    fn default() -> Self {
        Digest::EMPTY
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.hex(), self.size)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_constant_matches_sha256_of_nothing() {
        assert_eq!(Digest::of_bytes(b""), Digest::EMPTY);
    }

    #[test]
    fn parse_round_trips_and_rejects_garbage() {
        let d = Digest::of_bytes(b"hello");
        assert_eq!(Digest::parse(&d.to_string()).unwrap(), d);
        assert_eq!(Digest::from_file_name(&d.file_name()), Some(d));
        for bad in ["", "abc/1", &format!("{}/x", d.hex()), &d.hex()] {
            assert!(Digest::parse(bad).is_err(), "{bad} accepted");
        }
        let upper = format!("{}/5", d.hex().to_uppercase());
        assert!(Digest::parse(&upper).is_err());
        assert!(Digest::from_parts(&d.hex(), -1).is_err());
        assert!(Digest::from_parts(&d.hex(), 0).is_err());
    }

    #[test]
    fn hex_decoding_rejects_every_non_lowercase_hex_byte() {
        let d = Digest::of_bytes(b"hello");
        let hex = d.hex();
        assert_eq!(Digest::from_parts(&hex, 5).unwrap(), d);
        for pos in [0, 1, 31, 62, 63] {
            for b in 0u8..=255 {
                if b.is_ascii_digit() || (b'a'..=b'f').contains(&b) || !b.is_ascii() {
                    continue;
                }
                let mut s = hex.clone().into_bytes();
                s[pos] = b;
                let s = String::from_utf8(s).unwrap();
                assert!(Digest::from_parts(&s, 5).is_err(), "{s:?} accepted");
            }
        }
        assert!(Digest::from_parts(&hex[..63], 5).is_err());
        assert!(Digest::from_parts(&format!("{hex}0"), 5).is_err());
        assert!(Digest::from_parts(&format!("{}é", &hex[..62]), 5).is_err());
    }
}
