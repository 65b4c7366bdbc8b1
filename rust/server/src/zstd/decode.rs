//! The zstd push decoder (`Decompressor`) and `decompress` for a whole buffer: bounded
//! memory, output capped at the digest's size, several frames and skippable frames accepted
//! (see `super` for why). A frame's decoder exists only while the frame is decoded, and asks
//! its `DecoderMemory` for what the frame may hold (`frame_memory`) before it decodes a block.

use crate::failure::Failure;
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

/// Largest window a frame may declare (the default of libzstd's `ZSTD_d_windowLogMax`, 2^27).
pub(crate) const MAX_WINDOW: u64 = 128 << 20;

/// The largest block the zstd format allows (Block_Maximum_Size).
const BLOCK_MAX: usize = 128 * 1024;

/// What a frame's decoder holds beside its window of output: ruzstd's ring buffer keeps two
/// blocks of slack, its block, literals and sequence buffers a block each, and the input held
/// back (less than a block and a header).
const FRAME_OVERHEAD: u64 = 6 * BLOCK_MAX as u64;

/// What decoders' memory is charged to (the upload's share of a budget: `bytestream`).
pub(crate) trait DecoderMemory: Send {
    /// The decoder is about to hold at most `bytes` (0: it holds nothing any more). An error
    /// refuses the frame before any of it is decoded.
    fn hold(&mut self, bytes: u64) -> Result<(), Failure>;
}

/// The most a frame's decoder holds: its output while within the window (ruzstd gives out
/// only what lies beyond it until the frame ends), which is never more than the `left`
/// bytes the digest still allows, plus `FRAME_OVERHEAD`.
pub(crate) fn frame_memory(window: u64, left: u64) -> u64 {
    window.min(left) + FRAME_OVERHEAD
}

/// What the frame at the start of `data` will hold (`frame_memory`), if `data` starts with
/// a whole zstd frame header; `left` as for `frame_memory`.
pub(crate) fn first_frame_memory(data: &[u8], left: u64) -> Option<u64> {
    if data.len() < 5 || u32_le(data) != MAGIC || data.len() < header_len(data[4]) {
        return None;
    }
    Some(frame_memory(window_size(data), left))
}

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
    /// The current frame's decoder (None between frames: its memory is given back).
    dec: Option<FrameDecoder>,
    /// Where the decoders' memory is charged, if anywhere.
    memory: Option<Box<dyn DecoderMemory>>,
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

/// The window a frame header declares (RFC 8878 3.1.1.1.2; a single-segment frame's window
/// is its content size).
fn window_size(header: &[u8]) -> u64 {
    let d = header[4];
    if (d >> 5) & 1 == 1 {
        return declared_size(header).unwrap_or(0);
    }
    let w = header[5];
    let base = 1u64 << (10 + u32::from(w >> 3));
    base + (base / 8) * u64::from(w & 7)
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
        Decompressor {
            dec: None,
            memory: None,
            pending: Vec::new(),
            state: State::Between,
            consumed: 0,
            produced: 0,
            limit,
            frames: 0,
        }
    }

    /// A decoder whose frames ask `memory` for what they hold (`DecoderMemory`).
    pub fn with_memory(limit: u64, memory: Box<dyn DecoderMemory>) -> Decompressor {
        Decompressor {
            memory: Some(memory),
            ..Decompressor::new(limit)
        }
    }

    /// Compressed bytes received so far.
    #[cfg(test)]
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
        // What stays is less than a block: do not keep a large message's room for it.
        if self.pending.capacity() > 2 * BLOCK_MAX {
            self.pending.shrink_to(BLOCK_MAX + 16);
        }
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
                    let need = frame_memory(window_size(header), self.limit - self.produced);
                    // A fresh decoder per frame: ruzstd reserves a whole window up front when
                    // a used one is reset, and none is kept between frames.
                    let mut dec = FrameDecoder::new();
                    dec.set_max_window_size(MAX_WINDOW);
                    let r = catch(|| dec.reset(header).map_err(|e| e.to_string()));
                    r.map_err(|e| self.bad(format!("frame header: {e}")))?;
                    if let Some(m) = self.memory.as_mut() {
                        m.hold(need)?;
                    }
                    self.dec = Some(dec);
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
                    let Some(dec) = self.dec.as_mut() else {
                        return Err(Failure::Internal("zstd: a block outside a frame".into()));
                    };
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
                        if !self.dec.as_ref().is_some_and(|d| d.is_finished()) {
                            return Err(self.bad("the last block did not finish its frame"));
                        }
                        self.drain(out)?;
                        self.frames += 1;
                        self.state = State::Between;
                        self.dec = None;
                        if let Some(m) = self.memory.as_mut() {
                            m.hold(0)?;
                        }
                    }
                }
            }
        }
    }

    /// Hand out what the decoder may release (all of it once the frame is finished; else
    /// what lies beyond the window it must keep).
    fn drain(&mut self, out: &mut dyn FnMut(&[u8]) -> Result<(), Failure>) -> Result<(), Failure> {
        let n = self.dec.as_ref().map_or(0, |d| d.can_collect() as u64);
        if n == 0 {
            return Ok(());
        }
        if n > self.limit - self.produced {
            return Err(self.too_big());
        }
        // Straight from the decoder's ring buffer: at the end of a frame that is all of it,
        // which a copy would hold twice.
        let mut to = Out {
            out,
            sent: 0,
            failed: None,
        };
        let r = match self.dec.as_mut() {
            Some(d) => d.collect_to_writer(&mut to),
            None => Ok(0),
        };
        self.produced += to.sent;
        if let Some(f) = to.failed {
            return Err(f);
        }
        r.map_err(|e| self.bad(format!("collecting output: {e}")))?;
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

/// `out` as the writer ruzstd drains its output into, keeping `out`'s own failure.
struct Out<'a> {
    out: &'a mut dyn FnMut(&[u8]) -> Result<(), Failure>,
    sent: u64,
    failed: Option<Failure>,
}

impl std::io::Write for Out<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match (self.out)(buf) {
            Ok(()) => {
                self.sent += buf.len() as u64;
                Ok(buf.len())
            }
            Err(f) => {
                self.failed = Some(f);
                Err(std::io::Error::other("the output was refused"))
            }
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
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
