//! zstd for REAPI `compressed-blobs` (ByteStream) and zstd batch entries, with the pure-Rust
//! `ruzstd` (so the macOS target builds without a C cross compiler).
//!
//! `Decompressor` is a push decoder: compressed bytes arrive in gRPC messages of any size and
//! are decoded one zstd block at a time (a block regenerates at most 128 KiB), so memory stays
//! bounded by the frame's window (at most `MAX_WINDOW`, libzstd's default limit) plus one block,
//! whatever the input. Output that would exceed the digest's size stops decoding at once with
//! INVALID_ARGUMENT (a zstd bomb costs at most the window's worth of work past the limit). The
//! decoder state lives in the upload session, so an interrupted Write resumes at the compressed
//! offset Bazel's uploader seeks to. Several frames back to back and skippable frames are
//! accepted, as the zstd format allows. Frame checksums are not checked: every upload is
//! verified against its SHA-256 digest after decompression anyway.
//!
//! `compress_stream` / `compress` produce one frame of raw (stored) blocks: REAPI lets a server
//! pick any level, and on a local socket bytes cost less than compression. Measured on the
//! 51.7 MB clonestage executable (2-core x86_64 VM): ruzstd's `Fastest` level takes 2.8 s
//! (18 MB/s) for a 0.39 ratio, raw blocks 0.14 s; the whole compressed read over the unix socket
//! took 10x the plain one at `Fastest`. See docs/compression.md.

use crate::status::Failure;
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};
use ruzstd::encoding::{CompressionLevel, FrameCompressor};
use std::cell::Cell;
use std::io::{Read, Write};
use std::rc::Rc;

/// The most a piece buffer preallocates (`compress` asks for one piece of any size).
const READ_PIECE_MAX: usize = 4 << 20;

/// The level of what the server compresses (see the module doc).
const READ_LEVEL: CompressionLevel = CompressionLevel::Uncompressed;

/// Largest window a frame may declare (the default of libzstd's `ZSTD_d_windowLogMax`, 2^27).
pub(crate) const MAX_WINDOW: u64 = 128 << 20;

/// The largest block the zstd format allows (Block_Maximum_Size).
const BLOCK_MAX: usize = 128 * 1024;

const MAGIC: u32 = 0xFD2F_B528;
const SKIPPABLE_MASK: u32 = 0xFFFF_FFF0;
const SKIPPABLE: u32 = 0x184D_2A50;

enum State {
    /// Before a frame (or between frames).
    Between,
    /// Inside a frame whose header has been read.
    InFrame { checksum: bool },
    /// Inside a skippable frame: this many bytes left to drop.
    Skip(u64),
}

pub(crate) struct Decompressor {
    dec: FrameDecoder,
    /// Received bytes not decoded yet: less than one block (with its header) between calls.
    pending: Vec<u8>,
    state: State,
    /// Compressed bytes received (what QueryWriteStatus reports for a compressed upload).
    consumed: u64,
    /// Uncompressed bytes handed out.
    produced: u64,
    /// The digest's size: output beyond it is refused.
    limit: u64,
    frames: u64,
}

fn u32_le(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Length of a frame header (magic included) from its descriptor byte (RFC 8878 3.1.1.1).
fn header_len(descriptor: u8) -> usize {
    let fcs_flag = descriptor >> 6;
    let single_segment = (descriptor >> 5) & 1 == 1;
    let dict = [0, 1, 2, 4][(descriptor & 3) as usize];
    let fcs = match fcs_flag {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    4 + 1 + usize::from(!single_segment) + dict + fcs
}

/// The frame content size a header declares, if any.
fn declared_size(header: &[u8]) -> Option<u64> {
    let d = header[4];
    let single_segment = (d >> 5) & 1 == 1;
    let at = 5 + usize::from(!single_segment) + [0, 1, 2, 4][(d & 3) as usize];
    let b = &header[at..];
    match d >> 6 {
        0 if single_segment => Some(u64::from(b[0])),
        0 => None,
        1 => Some(u64::from(u16::from_le_bytes([b[0], b[1]])) + 256),
        2 => Some(u64::from(u32_le(b))),
        _ => Some(u64::from_le_bytes(b[..8].try_into().ok()?)),
    }
}

impl Decompressor {
    /// A decoder for a blob of `limit` uncompressed bytes.
    pub fn new(limit: u64) -> Decompressor {
        let mut dec = FrameDecoder::new();
        dec.set_max_window_size(MAX_WINDOW);
        Decompressor {
            dec,
            pending: Vec::new(),
            state: State::Between,
            consumed: 0,
            produced: 0,
            limit,
            frames: 0,
        }
    }

    /// Compressed bytes received so far.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    fn bad(&self, why: impl std::fmt::Display) -> Failure {
        Failure::InvalidArgument(format!(
            "zstd stream: {why} (after {} compressed bytes, {} bytes out)",
            self.consumed, self.produced
        ))
    }

    fn too_big(&self) -> Failure {
        Failure::InvalidArgument(format!(
            "zstd stream decompresses to more than the {} bytes the digest says",
            self.limit
        ))
    }

    /// Decode what `data` completes; hand uncompressed bytes to `out` as they come.
    pub fn feed(
        &mut self,
        data: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        self.consumed += data.len() as u64;
        self.pending.extend_from_slice(data);
        let mut pos = 0;
        let r = self.decode(&mut pos, out);
        self.pending.drain(..pos);
        r
    }

    fn decode(
        &mut self,
        pos: &mut usize,
        out: &mut dyn FnMut(&[u8]) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        loop {
            let avail = self.pending.len() - *pos;
            let at = *pos;
            match self.state {
                State::Skip(n) => {
                    let k = (avail as u64).min(n);
                    *pos += k as usize;
                    if k < n {
                        self.state = State::Skip(n - k);
                        return Ok(());
                    }
                    self.state = State::Between;
                }
                State::Between => {
                    if avail < 4 {
                        return Ok(());
                    }
                    let magic = u32_le(&self.pending[at..]);
                    if magic & SKIPPABLE_MASK == SKIPPABLE {
                        if avail < 8 {
                            return Ok(());
                        }
                        let n = u32_le(&self.pending[at + 4..]);
                        *pos += 8;
                        self.state = State::Skip(u64::from(n));
                        continue;
                    }
                    if magic != MAGIC {
                        return Err(self.bad(format!(
                            "{} bytes that do not start a zstd frame (magic {magic:#010x})",
                            avail
                        )));
                    }
                    if avail < 5 {
                        return Ok(());
                    }
                    let hlen = header_len(self.pending[at + 4]);
                    if avail < hlen {
                        return Ok(());
                    }
                    let header = &self.pending[at..at + hlen];
                    if declared_size(header).is_some_and(|n| n > self.limit - self.produced) {
                        return Err(self.too_big());
                    }
                    let checksum = (header[4] >> 2) & 1 == 1;
                    let r = catch(|| self.dec.reset(header).map_err(|e| e.to_string()));
                    r.map_err(|e| self.bad(format!("frame header: {e}")))?;
                    *pos += hlen;
                    self.state = State::InFrame { checksum };
                }
                State::InFrame { checksum } => {
                    if avail < 3 {
                        return Ok(());
                    }
                    let b = &self.pending[at..];
                    let h = u32::from(b[0]) | u32::from(b[1]) << 8 | u32::from(b[2]) << 16;
                    let last = h & 1 == 1;
                    let rle = (h >> 1) & 3 == 1;
                    let size = (h >> 3) as usize;
                    if size > BLOCK_MAX {
                        return Err(self.bad(format!(
                            "a block of {size} bytes (the format allows {BLOCK_MAX})"
                        )));
                    }
                    let need =
                        3 + if rle { 1 } else { size } + if last && checksum { 4 } else { 0 };
                    if avail < need {
                        return Ok(());
                    }
                    let block = &self.pending[at..at + need];
                    let dec = &mut self.dec;
                    let r = catch(|| {
                        let mut src = block;
                        dec.decode_blocks(&mut src, BlockDecodingStrategy::UptoBlocks(1))
                            .map_err(|e| e.to_string())?;
                        if src.is_empty() {
                            Ok(())
                        } else {
                            Err(format!("{} bytes of the block left undecoded", src.len()))
                        }
                    });
                    r.map_err(|e| self.bad(format!("block: {e}")))?;
                    *pos += need;
                    self.drain(out)?;
                    if last {
                        if !self.dec.is_finished() {
                            return Err(self.bad("the last block did not finish its frame"));
                        }
                        self.drain(out)?;
                        self.frames += 1;
                        self.state = State::Between;
                    }
                }
            }
        }
    }

    /// Hand out what the decoder may release (all of it once the frame is finished; else
    /// what lies beyond the window it must keep).
    fn drain(&mut self, out: &mut dyn FnMut(&[u8]) -> Result<(), Failure>) -> Result<(), Failure> {
        let n = self.dec.can_collect() as u64;
        if n == 0 {
            return Ok(());
        }
        if n > self.limit - self.produced {
            return Err(self.too_big());
        }
        if let Some(v) = self.dec.collect() {
            self.produced += v.len() as u64;
            out(&v)?;
        }
        Ok(())
    }

    /// The stream is complete: it must end between frames, after at least one.
    pub fn finish(&self) -> Result<(), Failure> {
        match self.state {
            State::Between if self.pending.is_empty() && self.frames > 0 => Ok(()),
            State::Between if self.pending.is_empty() => Err(self.bad("no zstd frame")),
            State::Between => Err(self.bad(format!(
                "{} trailing bytes after the last frame",
                self.pending.len()
            ))),
            State::Skip(n) => Err(self.bad(format!("ends {n} bytes short of a skippable frame"))),
            State::InFrame { .. } => Err(self.bad("ends inside a frame")),
        }
    }
}

/// Run a step of the third-party codec, turning a panic on hostile input into an error.
fn catch<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err("the zstd decoder failed on this input".into()))
}

/// Decompress a whole buffer that must hold exactly `size` uncompressed bytes.
pub(crate) fn decompress(data: &[u8], size: u64) -> Result<Vec<u8>, Failure> {
    let mut d = Decompressor::new(size);
    let mut v = Vec::with_capacity(size.min(16 << 20) as usize);
    d.feed(data, &mut |b| {
        v.extend_from_slice(b);
        Ok(())
    })?;
    d.finish()?;
    if v.len() as u64 != size {
        return Err(Failure::InvalidArgument(format!(
            "zstd stream decompresses to {} bytes, the digest says {size}",
            v.len()
        )));
    }
    Ok(v)
}

/// Source for the compressor: stops (end of input) once reading failed or the receiver left,
/// since ruzstd's compressor cannot take errors (it unwraps them).
struct Src<R> {
    inner: R,
    err: Option<std::io::Error>,
    /// Set by the sink when the receiver is gone.
    stop: Rc<Cell<bool>>,
}

impl<R: Read> Read for Src<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.stop.get() || self.err.is_some() {
            return Ok(0);
        }
        match self.inner.read(buf) {
            Ok(n) => Ok(n),
            Err(e) => {
                self.err = Some(e);
                Ok(0)
            }
        }
    }
}

/// Compress `src` into one zstd frame, handing it to `send` in pieces of about `chunk` bytes.
/// `send` returns false when nobody wants more (the client went away): compression stops.
/// A read error from `src` is returned after the pieces compressed before it.
pub(crate) fn compress_stream(
    src: impl Read,
    chunk: usize,
    mut send: impl FnMut(Vec<u8>) -> bool,
) -> std::io::Result<()> {
    struct Sink<'a, F: FnMut(Vec<u8>) -> bool> {
        buf: Vec<u8>,
        chunk: usize,
        send: &'a mut F,
        gone: Rc<Cell<bool>>,
    }
    impl<F: FnMut(Vec<u8>) -> bool> Write for Sink<'_, F> {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            if !self.gone.get() {
                self.buf.extend_from_slice(data);
                if self.buf.len() >= self.chunk {
                    let piece = std::mem::replace(
                        &mut self.buf,
                        Vec::with_capacity(self.chunk.min(READ_PIECE_MAX)),
                    );
                    self.gone.set(!(self.send)(piece));
                }
            }
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let gone = Rc::new(Cell::new(false));
    let mut sink = Sink {
        buf: Vec::with_capacity(chunk.min(READ_PIECE_MAX)),
        chunk,
        send: &mut send,
        gone: gone.clone(),
    };
    let mut c = FrameCompressor::new(READ_LEVEL);
    c.set_source(Src {
        inner: src,
        err: None,
        stop: gone.clone(),
    });
    c.set_drain(&mut sink);
    c.compress();
    let src = c.take_source().expect("source set above");
    drop(c);
    if let Some(e) = src.err {
        return Err(e);
    }
    if !gone.get() && !sink.buf.is_empty() {
        let rest = std::mem::take(&mut sink.buf);
        (sink.send)(rest);
    }
    Ok(())
}

/// One zstd frame of `data`.
pub(crate) fn compress(data: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    // Infallible: reading a slice and pushing into a Vec cannot fail.
    let _ = compress_stream(data, usize::MAX, |p| {
        v.extend(p);
        true
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real compressed blocks (what clients send), unlike the server's own raw-block frames.
    fn fastest(data: &[u8]) -> Vec<u8> {
        ruzstd::encoding::compress_to_vec(data, CompressionLevel::Fastest)
    }

    fn all(d: &mut Decompressor, data: &[u8], step: usize) -> Result<Vec<u8>, Failure> {
        let mut v = Vec::new();
        for piece in data.chunks(step.max(1)) {
            d.feed(piece, &mut |b| {
                v.extend_from_slice(b);
                Ok(())
            })?;
        }
        d.finish()?;
        Ok(v)
    }

    fn sample(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| ((i / 7) % 251) as u8 ^ (i % 3) as u8)
            .collect()
    }

    #[test]
    fn round_trip_in_any_message_size() {
        let blob = sample(700_000);
        let z = fastest(&blob);
        assert!(z.len() < blob.len() / 2);
        for step in [1, 2, 3, 17, 4096, 200_000, z.len()] {
            let mut d = Decompressor::new(blob.len() as u64);
            assert_eq!(all(&mut d, &z, step).unwrap(), blob, "step {step}");
            assert_eq!(d.consumed(), z.len() as u64);
        }
        assert_eq!(decompress(&compress(b""), 0).unwrap(), b"");
        assert_eq!(decompress(&compress(&blob), 700_000).unwrap(), blob);
    }

    #[test]
    fn several_frames_and_skippable_frames() {
        let (a, b) = (sample(300_000), sample(5));
        let mut z = vec![0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 1, 2, 3]; // skippable, 3 bytes
        z.extend(fastest(&a));
        z.extend(compress(&b));
        let mut d = Decompressor::new(300_005);
        assert_eq!(all(&mut d, &z, 1000).unwrap(), [a, b].concat());
    }

    #[test]
    fn refuses_garbage_truncation_and_overflow() {
        let blob = sample(200_000);
        let z = fastest(&blob);
        let n = blob.len() as u64;
        let msg = |r: Result<Vec<u8>, Failure>| r.unwrap_err().message();
        assert!(
            msg(all(&mut Decompressor::new(n), &blob, 4096)).contains("do not start a zstd frame")
        );
        assert!(
            msg(all(&mut Decompressor::new(n), &z[..z.len() - 1], 4096)).contains("inside a frame")
        );
        assert!(msg(all(
            &mut Decompressor::new(n),
            &[z.clone(), vec![1, 2]].concat(),
            4096
        ))
        .contains("trailing"));
        assert!(msg(all(&mut Decompressor::new(n), b"", 1)).contains("no zstd frame"));
        assert!(msg(all(&mut Decompressor::new(n - 1), &z, 4096))
            .contains("more than the 199999 bytes"));
        // Corrupt a byte inside the first block: an error, not a panic.
        let mut bad = z.clone();
        for i in (10..bad.len()).step_by(97) {
            bad[i] ^= 0x5a;
        }
        let _ = all(&mut Decompressor::new(n), &bad, 4096);
    }

    #[test]
    fn mutated_streams_end_in_a_result_never_a_panic() {
        let blob = sample(20_000);
        let mut z = fastest(&blob);
        z.extend(compress(&blob[..300]));
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..3000 {
            let mut m = z.clone();
            for _ in 0..1 + next() % 4 {
                let i = (next() as usize) % m.len();
                match next() % 3 {
                    0 => m[i] = next() as u8,
                    1 => m.truncate(i.max(1)),
                    _ => m.insert(i, next() as u8),
                }
            }
            let step = 1 + (next() as usize) % 5000;
            let _ = all(&mut Decompressor::new(20_300), &m, step);
        }
    }

    #[test]
    fn a_bomb_stops_near_the_limit() {
        // 16 GiB of RLE blocks behind a frame with a 2 MiB window, claimed to be 10 bytes.
        let mut z = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x58];
        for _ in 0..131_072 {
            let h: u32 = (1 << 1) | ((128 * 1024) << 3);
            z.extend_from_slice(&h.to_le_bytes()[..3]);
            z.push(b'A');
        }
        let mut d = Decompressor::new(10);
        let mut out = 0usize;
        let e = d
            .feed(&z, &mut |b| {
                out += b.len();
                Ok(())
            })
            .unwrap_err();
        assert!(
            e.message().contains("more than the 10 bytes"),
            "{}",
            e.message()
        );
        assert_eq!(out, 0);
        // A declared content size beyond the limit is refused from the header alone.
        let big = fastest(&sample(1000));
        let mut one = vec![0x28, 0xb5, 0x2f, 0xfd, 0x20 | 0x80, 0, 0, 1, 0]; // single segment, 4-byte size 65536
        one.extend_from_slice(&[1, 0, 0]); // an empty last raw block
        let e = decompress(&one, 10).unwrap_err();
        assert!(
            e.message().contains("more than the 10 bytes"),
            "{}",
            e.message()
        );
        assert!(decompress(&big, 999).is_err());
    }

    #[test]
    fn compress_stream_pieces_and_a_gone_receiver() {
        let blob = sample(3_000_000);
        let mut pieces = Vec::new();
        compress_stream(&blob[..], 64 * 1024, |p| {
            pieces.push(p);
            true
        })
        .unwrap();
        assert!(pieces.len() > 1);
        assert!(pieces[..pieces.len() - 1]
            .iter()
            .all(|p| p.len() >= 64 * 1024));
        assert_eq!(
            decompress(&pieces.concat(), blob.len() as u64).unwrap(),
            blob
        );
        let mut calls = 0;
        compress_stream(&blob[..], 1024, |_| {
            calls += 1;
            false
        })
        .unwrap();
        assert_eq!(calls, 1);
        struct Failing;
        impl Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk gone"))
            }
        }
        assert!(compress_stream(Failing, 1024, |_| true).is_err());
    }
}
