//! ByteStream resource names (REAPI v2):
//! reads `{instance}/blobs/{hash}/{size}`, writes
//! `{instance}/uploads/{uuid}/blobs/{hash}/{size}{/optional metadata}`. The instance name may
//! have any number of segments (it cannot contain the reserved words). A `sha256` segment after
//! `blobs/` (v2.3 style) is accepted; other digest functions and compressed blobs are refused.

use crate::status::Failure;
use clonestage_engine::Digest;

fn bad(name: &str, why: &str) -> Failure {
    Failure::InvalidArgument(format!("resource name '{name}': {why}"))
}

/// The digest in `blobs/[sha256/]{hash}/{size}` starting at `segs[0] == "blobs"`; returns it and
/// the index after it.
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

fn first_reserved<'a>(segs: &[&'a str]) -> Option<(usize, &'a str)> {
    segs.iter()
        .position(|s| matches!(*s, "blobs" | "uploads" | "compressed-blobs"))
        .map(|i| (i, segs[i]))
}

/// The blob a Read names.
pub(crate) fn parse_read(name: &str) -> Result<Digest, Failure> {
    let segs: Vec<&str> = name.split('/').collect();
    match first_reserved(&segs) {
        Some((i, "blobs")) => {
            let (d, end) = blob_digest(name, &segs[i..])?;
            if i + end != segs.len() {
                return Err(bad(name, "unexpected segments after the size"));
            }
            Ok(d)
        }
        Some((_, "compressed-blobs")) => Err(bad(name, "compressed blobs are not supported")),
        _ => Err(bad(name, "expected {instance}/blobs/{hash}/{size}")),
    }
}

/// The blob a Write names.
pub(crate) fn parse_write(name: &str) -> Result<Digest, Failure> {
    let segs: Vec<&str> = name.split('/').collect();
    match first_reserved(&segs) {
        Some((i, "uploads")) if segs.len() > i + 2 => match segs[i + 2] {
            "blobs" if !segs[i + 1].is_empty() => Ok(blob_digest(name, &segs[i + 2..])?.0),
            "compressed-blobs" => Err(bad(name, "compressed blobs are not supported")),
            _ => Err(bad(
                name,
                "expected {instance}/uploads/{uuid}/blobs/{hash}/{size}",
            )),
        },
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
        assert_eq!(parse_read(&format!("blobs/{h}/5")).unwrap(), d);
        assert_eq!(parse_read(&format!("a/b/blobs/{h}/5")).unwrap(), d);
        assert_eq!(parse_read(&format!("blobs/sha256/{h}/5")).unwrap(), d);
        assert!(parse_read(&format!("blobs/blake3/{h}/5")).is_err());
        assert!(parse_read(&format!("blobs/{h}/x")).is_err());
        assert!(parse_read(&format!("blobs/{h}/5/extra")).is_err());
        assert!(parse_read(&format!("compressed-blobs/zstd/{h}/5")).is_err());
        assert_eq!(parse_write(&format!("uploads/u-1/blobs/{h}/5")).unwrap(), d);
        assert_eq!(
            parse_write(&format!("inst/uploads/u-1/blobs/{h}/5/meta/data")).unwrap(),
            d
        );
        assert!(parse_write(&format!("blobs/{h}/5")).is_err());
        assert!(parse_write(&format!("uploads//blobs/{h}/5")).is_err());
    }
}
