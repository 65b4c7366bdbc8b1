//! The zstd codec's unit tests: round trips in any message size, several and skippable
//! frames, garbage, truncation, overflow, mutated streams, bombs, and streamed compression.

use super::*;
use crate::failure::Failure;
use ruzstd::encoding::CompressionLevel;
use std::io::Read;

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
    assert!(msg(all(&mut Decompressor::new(n), &blob, 4096)).contains("do not start a zstd frame"));
    assert!(msg(all(&mut Decompressor::new(n), &z[..z.len() - 1], 4096)).contains("inside a frame"));
    assert!(msg(all(
        &mut Decompressor::new(n),
        &[z.clone(), vec![1, 2]].concat(),
        4096
    ))
    .contains("trailing"));
    assert!(msg(all(&mut Decompressor::new(n), b"", 1)).contains("no zstd frame"));
    assert!(
        msg(all(&mut Decompressor::new(n - 1), &z, 4096)).contains("more than the 199999 bytes")
    );
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

/// A frame of raw blocks with a 2^`log` window (no content size).
fn raw_frame(blob: &[u8], log: u8) -> Vec<u8> {
    let mut v = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, (log - 10) << 3];
    let blocks: Vec<&[u8]> = blob.chunks(128 * 1024).collect();
    for (i, b) in blocks.iter().enumerate() {
        let h = u32::from(i + 1 == blocks.len()) | ((b.len() as u32) << 3);
        v.extend_from_slice(&h.to_le_bytes()[..3]);
        v.extend_from_slice(b);
    }
    v
}

/// Records what a decoder asks for; refuses more than `cap`.
struct Ledger(std::sync::Arc<std::sync::Mutex<Vec<u64>>>, u64);

impl DecoderMemory for Ledger {
    fn hold(&mut self, bytes: u64) -> Result<(), Failure> {
        self.0.lock().unwrap().push(bytes);
        if bytes > self.1 {
            return Err(Failure::ResourceExhausted("no room".into()));
        }
        Ok(())
    }
}

#[test]
fn each_frame_asks_for_its_window_or_what_is_left_and_gives_it_back() {
    let (a, b) = (sample(300_000), sample(50_000));
    // A 1 MiB window over a 350,000-byte blob; then a skippable frame and a 128 KiB window.
    let mut z = raw_frame(&a, 20);
    z.extend([0x50, 0x2a, 0x4d, 0x18, 1, 0, 0, 0, 9]);
    z.extend(raw_frame(&b, 17));
    let asked = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut d = Decompressor::with_memory(350_000, Box::new(Ledger(asked.clone(), u64::MAX)));
    assert_eq!(
        first_frame_memory(&z, 350_000),
        Some(frame_memory(1 << 20, 350_000))
    );
    assert_eq!(all(&mut d, &z, 5000).unwrap(), [a, b].concat());
    assert_eq!(
        *asked.lock().unwrap(),
        [
            frame_memory(1 << 20, 350_000),
            0,
            frame_memory(128 << 10, 50_000),
            0
        ]
    );
    // A frame refused its memory is not decoded.
    let mut d = Decompressor::with_memory(350_000, Box::new(Ledger(asked.clone(), 1000)));
    let mut out = 0;
    let e = d
        .feed(&z, &mut |b| {
            out += b.len();
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(e, Failure::ResourceExhausted(_)), "{e:?}");
    assert_eq!(out, 0);
}
