//! zstd for REAPI `compressed-blobs` (ByteStream) and zstd batch entries, with the pure-Rust
//! `ruzstd` (so the macOS target builds without a C cross compiler).
//!
//! `Decompressor` is a push decoder: compressed bytes arrive in gRPC messages of any size and
//! are decoded one zstd block at a time (a block regenerates at most 128 KiB), so memory stays
//! bounded by the frame's window (at most `MAX_WINDOW`, libzstd's default limit) or the bytes
//! the digest still allows, whichever is smaller, plus a few blocks, whatever the input; each
//! frame asks its `DecoderMemory` for that much first (ByteStream charges it to a budget) and
//! gives it back when it ends. Output that would exceed the digest's size stops decoding at
//! once with INVALID_ARGUMENT (a zstd bomb costs at most the window's worth of work past the
//! limit). A decoder belongs to one Write stream: a resumed compressed Write is a new zstd
//! stream (REAPI; see `bytestream::write_call`). Several frames back to back and skippable frames are
//! accepted, as the zstd format allows. Frame checksums are not checked: every upload is
//! verified against its SHA-256 digest after decompression anyway.
//!
//! `compress_stream` / `compress` produce one frame of raw (stored) blocks: REAPI lets a server
//! pick any level, and on a local socket bytes cost less than compression. Measured on the
//! 51.7 MB clonestage executable (2-core x86_64 VM): ruzstd's `Fastest` level takes 2.8 s
//! (18 MB/s) for a 0.39 ratio, raw blocks 0.14 s; the whole compressed read over the unix socket
//! took 10x the plain one at `Fastest`. See docs/compression.md.
//!
//! Files: `decode` (the push decoder and `decompress`), `encode` (`compress_stream`,
//! `compress`), `tests`. Shared by the CAS batch calls and ByteStream, so it is neither's.

mod decode;
mod encode;

#[cfg(test)]
pub(crate) use decode::frame_memory;
pub(crate) use decode::{decompress, first_frame_memory, DecoderMemory, Decompressor};
pub(crate) use encode::{compress, compress_stream};

#[cfg(test)]
mod tests;
