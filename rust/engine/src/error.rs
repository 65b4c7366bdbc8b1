//! Engine errors. Every variant names what was being handled (path, digest, syscall) so a
//! user or a REAPI client can act on it; the server maps `Error::class()` to gRPC codes.

use crate::digest::{BadDigest, Digest};
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A syscall failed. `op` names the call (e.g. "linkat"), `path` the object.
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A tree from a client breaks a rule (bad name, unsorted entries, escaping symlink, ...).
    #[error("invalid tree at '{path}' (directory {digest}): {reason}")]
    InvalidTree {
        path: String,
        digest: Digest,
        reason: String,
    },
    /// Any other bad client input (an output path, a digest string, a request field).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Blobs the tree references but the cache does not hold.
    #[error("{} blob(s) missing from the cache{} (needed at '{path}')", digests.len(), first_of(digests))]
    Missing { digests: Vec<Digest>, path: String },
    /// Content does not hash to the digest it was offered under.
    #[error("digest mismatch for {what}: expected {expected}, got {actual}")]
    DigestMismatch {
        what: String,
        expected: Digest,
        actual: Digest,
    },
    /// Staging refuses to touch anything that already exists at the destination.
    #[error("destination {} already exists; refusing to stage over it", .0.display())]
    DestinationExists(PathBuf),
    /// A failure injected by a test (see `StageRequest::fail_after_files`); only in builds
    /// with the cargo feature `fault-injection`.
    #[cfg(feature = "fault-injection")]
    #[error("injected fault after {0} files")]
    Injected(usize),
}

/// Coarse classes that decide how a caller reports an error (REAPI status codes, exit codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    InvalidArgument,
    FailedPrecondition,
    AlreadyExists,
    /// The disk (or the user's quota) is full: ENOSPC, EDQUOT. Nothing partial was kept.
    ResourceExhausted,
    Internal,
}

/// Whether an I/O error means the filesystem (or the user's quota) is full.
pub fn is_out_of_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

impl Error {
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::InvalidTree { .. }
            | Error::InvalidArgument(_)
            | Error::DigestMismatch { .. } => ErrorClass::InvalidArgument,
            Error::Missing { .. } => ErrorClass::FailedPrecondition,
            Error::DestinationExists(_) => ErrorClass::AlreadyExists,
            Error::Io { source, .. } if is_out_of_space(source) => ErrorClass::ResourceExhausted,
            Error::Io { .. } => ErrorClass::Internal,
            #[cfg(feature = "fault-injection")]
            Error::Injected(_) => ErrorClass::Internal,
        }
    }

    pub fn io(op: &'static str, path: impl AsRef<Path>, source: io::Error) -> Error {
        Error::Io {
            op,
            path: path.as_ref().to_path_buf(),
            source,
        }
    }
}

impl From<BadDigest> for Error {
    fn from(e: BadDigest) -> Error {
        Error::InvalidArgument(e.0)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Attach the syscall name and path to an `io::Result`.
pub trait IoContext<T> {
    fn ctx(self, op: &'static str, path: impl AsRef<Path>) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| Error::io(op, path, e))
    }
}

/// ", first <digest>" for a Missing error's message; nothing for an empty list (a message
/// must never panic, whoever built the error).
fn first_of(digests: &[Digest]) -> String {
    digests
        .first()
        .map(|d| format!(", first {d}"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_disk_or_quota_is_resource_exhausted_and_other_io_errors_internal() {
        for (errno, class) in [
            (libc::ENOSPC, ErrorClass::ResourceExhausted),
            (libc::EDQUOT, ErrorClass::ResourceExhausted),
            (libc::EIO, ErrorClass::Internal),
        ] {
            let e = Error::io("write", "/x", io::Error::from_raw_os_error(errno));
            assert_eq!(e.class(), class, "errno {errno}");
        }
    }

    #[test]
    fn a_bad_digest_is_an_invalid_argument_with_the_same_text() {
        let bad = Digest::parse("abc/1").unwrap_err();
        let e = Error::from(bad.clone());
        assert_eq!(e.class(), ErrorClass::InvalidArgument);
        assert_eq!(e.to_string(), bad.to_string());
        assert_eq!(
            e.to_string(),
            "invalid argument: digest hash 'abc' is not 64 lowercase hex digits"
        );
    }

    #[test]
    fn a_missing_error_with_no_digest_still_has_a_message() {
        // Panicked (index out of bounds) in the reliability suite's two-output-base part.
        let e = Error::Missing {
            digests: vec![],
            path: "a/b".into(),
        };
        assert_eq!(
            e.to_string(),
            "0 blob(s) missing from the cache (needed at 'a/b')"
        );
    }
}
