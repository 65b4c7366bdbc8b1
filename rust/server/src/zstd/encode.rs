//! The server's zstd output: one frame of raw (stored) blocks, streamed in pieces
//! (`compress_stream`) or whole (`compress`); see `super` for why not a higher level.

use ruzstd::encoding::{CompressionLevel, FrameCompressor};
use std::cell::Cell;
use std::io::{Read, Write};
use std::rc::Rc;

/// The most a piece buffer preallocates (`compress` asks for one piece of any size).
const READ_PIECE_MAX: usize = 4 << 20;

/// The level of what the server compresses (see the module doc).
const READ_LEVEL: CompressionLevel = CompressionLevel::Uncompressed;

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
