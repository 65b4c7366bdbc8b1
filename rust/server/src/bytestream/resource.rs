//! ByteStream resource names (REAPI v2):
//! reads `{instance}/blobs/{hash}/{size}` and `{instance}/compressed-blobs/zstd/{hash}/{size}`,
//! writes `{instance}/uploads/{uuid}/blobs/{hash}/{size}{/optional metadata}` and
//! `{instance}/uploads/{uuid}/compressed-blobs/zstd/{hash}/{size}{/optional metadata}`. The
//! instance name may have any number of segments (it cannot contain the reserved words). A
//! `sha256` segment before the hash (v2.3 style) is accepted; other digest functions and other
//! compressors are refused with INVALID_ARGUMENT naming what is supported.

use crate::failure::Failure;
use clonestage_engine::Digest;

fn bad(name: &str, why: &str) -> Failure {
    Failure::InvalidArgument(format!("resource name '{name}': {why}"))
}

/// How a resource's bytes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    Identity,
    Zstd,
}

/// The blob a resource name names, and how its bytes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blob {
    pub digest: Digest,
    pub encoding: Encoding,
}

/// The digest in `blobs/[sha256/]{hash}/{size}` starting at `segs[0] == "blobs"` (or at the
/// compressor of `compressed-blobs/{compressor}/...`); returns it and the index after it.
fn blob_digest(name: &str, segs: &[&str]) -> Result<(Digest, usize), Failure> {
    let mut i = 1;
    if segs.get(i).is_some_and(|s| {
        s.len() != 64 && s.bytes().all(|b| b.is_ascii_alphanumeric()) && segs.len() > i + 2
    }) {
        if segs[i] != "sha256" {
            return Err(bad(
                name,
                &format!(
                    "digest function '{}' is not supported (SHA256 only)",
                    segs[i]
                ),
            ));
        }
        i += 1;
    }
    let (Some(hash), Some(size)) = (segs.get(i), segs.get(i + 1)) else {
        return Err(bad(name, "expected blobs/{hash}/{size}"));
    };
    let size: i64 = size
        .parse()
        .map_err(|_| bad(name, &format!("size '{size}' is not a number")))?;
    let d = Digest::from_parts(hash, size).map_err(|e| bad(name, &e.to_string()))?;
    Ok((d, i + 2))
}

/// `compressed-blobs/{compressor}/[sha256/]{hash}/{size}` starting at
/// `segs[0] == "compressed-blobs"`; returns the digest and the index after it.
fn compressed_digest(name: &str, segs: &[&str]) -> Result<(Digest, usize), Failure> {
    match segs.get(1).copied() {
        Some("zstd") => {
            let (d, end) = blob_digest(name, &segs[1..])?;
            Ok((d, end + 1))
        }
        Some("identity") => Err(bad(
            name,
            "compressor 'identity' is not a compressed-blobs compressor (use blobs/)",
        )),
        Some(c) => Err(bad(
            name,
            &format!("compressor '{c}' is not supported (zstd only)"),
        )),
        None => Err(bad(name, "expected compressed-blobs/zstd/{hash}/{size}")),
    }
}

fn first_reserved<'a>(segs: &[&'a str]) -> Option<(usize, &'a str)> {
    segs.iter()
        .position(|s| matches!(*s, "blobs" | "uploads" | "compressed-blobs"))
        .map(|i| (i, segs[i]))
}

/// The blob a Read names.
pub(crate) fn parse_read(name: &str) -> Result<Blob, Failure> {
    let segs: Vec<&str> = name.split('/').collect();
    let (i, (digest, end), encoding) = match first_reserved(&segs) {
        Some((i, "blobs")) => (i, blob_digest(name, &segs[i..])?, Encoding::Identity),
        Some((i, "compressed-blobs")) => (i, compressed_digest(name, &segs[i..])?, Encoding::Zstd),
        _ => return Err(bad(name, "expected {instance}/blobs/{hash}/{size}")),
    };
    if i + end != segs.len() {
        return Err(bad(name, "unexpected segments after the size"));
    }
    Ok(Blob { digest, encoding })
}

/// The blob a Write names.
pub(crate) fn parse_write(name: &str) -> Result<Blob, Failure> {
    let segs: Vec<&str> = name.split('/').collect();
    let blob = |digest, encoding| Ok(Blob { digest, encoding });
    match first_reserved(&segs) {
        Some((i, "uploads")) if segs.len() > i + 2 && !segs[i + 1].is_empty() => {
            match segs[i + 2] {
                "blobs" => blob(blob_digest(name, &segs[i + 2..])?.0, Encoding::Identity),
                "compressed-blobs" => {
                    blob(compressed_digest(name, &segs[i + 2..])?.0, Encoding::Zstd)
                }
                _ => Err(bad(
                    name,
                    "expected {instance}/uploads/{uuid}/blobs/{hash}/{size}",
                )),
            }
        }
        _ => Err(bad(
            name,
            "expected {instance}/uploads/{uuid}/blobs/{hash}/{size}",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let d = Digest::of_bytes(b"hello");
        let h = d.hex();
        let plain = Blob {
            digest: d,
            encoding: Encoding::Identity,
        };
        let zstd = Blob {
            digest: d,
            encoding: Encoding::Zstd,
        };
        assert_eq!(parse_read(&format!("blobs/{h}/5")).unwrap(), plain);
        assert_eq!(parse_read(&format!("a/b/blobs/{h}/5")).unwrap(), plain);
        assert_eq!(parse_read(&format!("blobs/sha256/{h}/5")).unwrap(), plain);
        assert!(parse_read(&format!("blobs/blake3/{h}/5")).is_err());
        assert!(parse_read(&format!("blobs/{h}/x")).is_err());
        assert!(parse_read(&format!("blobs/{h}/5/extra")).is_err());
        assert_eq!(
            parse_read(&format!("compressed-blobs/zstd/{h}/5")).unwrap(),
            zstd
        );
        assert_eq!(
            parse_read(&format!("i/compressed-blobs/zstd/sha256/{h}/5")).unwrap(),
            zstd
        );
        let err = |r: Result<Blob, Failure>| r.unwrap_err().message();
        assert!(
            err(parse_read(&format!("compressed-blobs/zstd/{h}/5/x"))).contains("after the size")
        );
        assert!(err(parse_read(&format!("compressed-blobs/deflate/{h}/5")))
            .contains("'deflate' is not supported (zstd only)"));
        assert!(err(parse_read(&format!("compressed-blobs/identity/{h}/5"))).contains("use blobs/"));
        assert!(
            err(parse_read(&format!("compressed-blobs/zstd/blake3/{h}/5")))
                .contains("'blake3' is not supported")
        );
        assert!(parse_read("compressed-blobs").is_err());
        assert_eq!(
            parse_write(&format!("uploads/u-1/blobs/{h}/5")).unwrap(),
            plain
        );
        assert_eq!(
            parse_write(&format!("inst/uploads/u-1/blobs/{h}/5/meta/data")).unwrap(),
            plain
        );
        assert_eq!(
            parse_write(&format!(
                "inst/uploads/u-1/compressed-blobs/zstd/{h}/5/meta"
            ))
            .unwrap(),
            zstd
        );
        assert!(parse_write(&format!("uploads/u/compressed-blobs/lz4/{h}/5")).is_err());
        assert!(parse_write(&format!("uploads//compressed-blobs/zstd/{h}/5")).is_err());
        assert!(parse_write(&format!("blobs/{h}/5")).is_err());
        assert!(parse_write(&format!("uploads//blobs/{h}/5")).is_err());
    }
}
