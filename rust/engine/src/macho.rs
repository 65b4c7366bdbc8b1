//! Recognising Mach-O code that macOS verifies per inode, from a file's bytes as they stream
//! past once (the hash at ingest), so the cache can record it when the blob enters
//! (`cas::code_record`) and staging can hardlink it (`--preserve-inodes macho`).
//!
//! Why per inode: XNU attaches a file's code-signature blobs to its vnode (`ubc_cs_blob_add`
//! sets `uip->cs_blobs`, apple-oss-distributions/xnu xnu-11417.121.6 bsd/kern/ubc_subr.c
//! lines 4715 and 5107), so a clone, being a new inode, is verified again on its first run.
//! Only images the kernel or dyld map as code are verified that way: executables, dylibs,
//! bundles (plugins: Swift macros) and the dynamic linker (`MH_EXECUTE`, `MH_DYLIB`,
//! `MH_BUNDLE`, `MH_DYLINKER`, `<mach-o/loader.h>`). Object files, dSYMs, stubs and cores are
//! Mach-O too but never executed: they are not "code" here, so a link action's hundreds of
//! `.o` inputs keep the clone fast path.
//!
//! Formats (`<mach-o/loader.h>`, `<mach-o/fat.h>`):
//! - thin: `MH_MAGIC` 0xfeedface / `MH_MAGIC_64` 0xfeedfacf in the file's own byte order (so
//!   `ce fa ed fe` / `cf fa ed fe` on disk for little-endian arm64 and x86_64, `fe ed fa ce` /
//!   `fe ed fa cf` byte-swapped, big-endian), `filetype` the u32 at offset 12 in that order;
//! - fat (universal): `FAT_MAGIC` 0xcafebabe or `FAT_MAGIC_64` 0xcafebabf, always big-endian,
//!   `nfat_arch` at offset 4, then `fat_arch` (20 bytes: cputype, cpusubtype, u32 offset,
//!   u32 size, align) or `fat_arch_64` (32 bytes: u64 offset and size, align, reserved)
//!   entries; each slice is a thin image at its offset.
//!
//! 0xcafebabe is also a Java class file's magic, followed by u16 minor and u16 major version
//! (major >= 45). file(1) tells them apart by the big-endian u32 at offset 4: 1..19 is a
//! universal binary, > 30 a class file (file/file magic/Magdir/cafebabe); LLVM accepts a
//! universal binary when byte 7 is below 43 (llvm-project llvm/lib/BinaryFormat/Magic.cpp,
//! `identify_magic`, case 0xCA). Here `nfat_arch` must be 1..=42 with bytes 4..7 as a u32
//! (a class file's is minor << 16 | major >= 45), every entry's slice must lie inside the
//! file, and a slice must itself start with a thin header of a code type: a class file
//! passes none of these.

/// How many leading bytes are kept: a fat header with 42 64-bit entries needs 8 + 42 * 32.
const HEAD: usize = 4096;
/// The fat header's `nfat_arch` bound (LLVM's: byte 7 < 43; above it lies Java's 45+).
const MAX_FAT_ARCH: u32 = 42;
/// Slices whose thin headers are looked at (universal binaries hold 2-4).
const MAX_SLICES: usize = 8;
/// A thin header is read up to `filetype` (offset 12) inclusive.
const THIN: usize = 16;

const MH_EXECUTE: u32 = 0x2;
const MH_DYLIB: u32 = 0x6;
const MH_DYLINKER: u32 = 0x7;
const MH_BUNDLE: u32 = 0x8;

/// Whether a thin header (at least `THIN` bytes) is Mach-O code: executable, dylib, dynamic
/// linker or bundle, in either byte order.
fn thin_is_code(h: &[u8]) -> bool {
    if h.len() < THIN {
        return false;
    }
    let field = |be: bool| {
        let b = [h[12], h[13], h[14], h[15]];
        if be {
            u32::from_be_bytes(b)
        } else {
            u32::from_le_bytes(b)
        }
    };
    let filetype = match h[..4] {
        [0xfe, 0xed, 0xfa, 0xce | 0xcf] => field(true),
        [0xce | 0xcf, 0xfa, 0xed, 0xfe] => field(false),
        _ => return false,
    };
    matches!(filetype, MH_EXECUTE | MH_DYLIB | MH_DYLINKER | MH_BUNDLE)
}

/// One slice of a universal binary: where it is, and its first bytes once they streamed by.
#[derive(Debug, Clone)]
struct Slice {
    offset: u64,
    end: u64,
    head: [u8; THIN],
    got: usize,
}

/// Classifies a file from its bytes in order, without a second read: keeps the first
/// `HEAD` bytes, and for a universal binary the thin header at each slice's offset as the
/// stream passes it.
#[derive(Debug, Default)]
pub struct Sniffer {
    head: Vec<u8>,
    /// Bytes seen so far.
    pos: u64,
    /// A universal binary's slices, once its header has been read (None: not fat, or not yet).
    slices: Option<Vec<Slice>>,
    /// The fat header was malformed (or is a Java class file): not code.
    bad_fat: bool,
}

impl Sniffer {
    pub fn new() -> Sniffer {
        Sniffer::default()
    }

    /// The next bytes of the file.
    pub fn feed(&mut self, chunk: &[u8]) {
        let start = self.pos;
        self.pos += chunk.len() as u64;
        if self.head.len() < HEAD {
            let take = (HEAD - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..take]);
            if self.slices.is_none() && !self.bad_fat && self.head.len() >= 8 {
                self.read_fat_header();
            }
        }
        if let Some(slices) = &mut self.slices {
            for s in slices.iter_mut() {
                // Copy what of [offset, offset + THIN) lies in [start, pos).
                let want_from = s.offset + s.got as u64;
                let want_to = s.offset + THIN as u64;
                let from = want_from.max(start);
                let to = want_to.min(self.pos);
                if from < to {
                    let src = &chunk[(from - start) as usize..(to - start) as usize];
                    s.head[s.got..s.got + src.len()].copy_from_slice(src);
                    s.got += src.len();
                }
            }
        }
    }

    /// Parse a fat header once enough of it is in `head` (called as the head grows).
    fn read_fat_header(&mut self) {
        let h = &self.head;
        let wide = match h[..4] {
            [0xca, 0xfe, 0xba, 0xbe] => false,
            [0xca, 0xfe, 0xba, 0xbf] => true,
            _ => {
                self.bad_fat = true; // not fat at all; never looked at again
                return;
            }
        };
        let n = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
        if n == 0 || n > MAX_FAT_ARCH {
            self.bad_fat = true;
            return;
        }
        let entry = if wide { 32 } else { 20 };
        let need = 8 + n as usize * entry;
        if h.len() < need {
            return; // more of the head first (HEAD always holds 42 wide entries)
        }
        let be32 = |o: usize| u32::from_be_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]) as u64;
        let be64 = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[o..o + 8]);
            u64::from_be_bytes(b)
        };
        let mut slices = Vec::new();
        for i in 0..n as usize {
            let e = 8 + i * entry;
            let (offset, size) = if wide {
                (be64(e + 8), be64(e + 16))
            } else {
                (be32(e + 8), be32(e + 12))
            };
            let Some(end) = offset.checked_add(size) else {
                self.bad_fat = true;
                return;
            };
            // A slice may not overlap the header it is listed in.
            if offset < need as u64 || size < THIN as u64 {
                self.bad_fat = true;
                return;
            }
            if slices.len() < MAX_SLICES {
                slices.push(Slice {
                    offset,
                    end,
                    head: [0; THIN],
                    got: 0,
                });
            }
        }
        self.slices = Some(slices);
    }

    /// Whether the whole file (every byte fed) is Mach-O code.
    pub fn is_code(&self) -> bool {
        if thin_is_code(&self.head) {
            return true;
        }
        if self.bad_fat {
            return false;
        }
        match &self.slices {
            Some(slices) => {
                slices.iter().all(|s| s.end <= self.pos)
                    && slices
                        .iter()
                        .any(|s| s.got == THIN && thin_is_code(&s.head))
            }
            None => false,
        }
    }
}

/// Whether `bytes`, a whole file, is Mach-O code.
pub fn is_code(bytes: &[u8]) -> bool {
    let mut s = Sniffer::new();
    s.feed(bytes);
    s.is_code()
}

/// A reader that shows every byte it passes on to a `Sniffer`.
pub struct Sniffing<'a, R> {
    pub inner: R,
    pub sniffer: &'a mut Sniffer,
}

impl<R: std::io::Read> std::io::Read for Sniffing<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sniffer.feed(&buf[..n]);
        Ok(n)
    }
}

/// Test images: thin and universal Mach-O headers of a given type, padded to a size.
#[cfg(test)]
pub(crate) mod samples {
    /// A little-endian 64-bit thin image (arm64) of `filetype`, `len` bytes.
    pub fn thin(filetype: u32, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len.max(32)];
        v[..4].copy_from_slice(&0xfeed_facf_u32.to_le_bytes());
        v[4..8].copy_from_slice(&0x0100_000c_u32.to_le_bytes()); // CPU_TYPE_ARM64
        v[12..16].copy_from_slice(&filetype.to_le_bytes());
        v
    }

    /// A universal binary of the thin images `slices`, each at a 4 KiB-aligned offset.
    pub fn fat(slices: &[Vec<u8>], wide: bool) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(
            &if wide {
                0xcafe_babf_u32
            } else {
                0xcafe_babe_u32
            }
            .to_be_bytes(),
        );
        out.extend_from_slice(&(slices.len() as u32).to_be_bytes());
        let mut offset = 4096u64;
        let mut placed = Vec::new();
        for s in slices {
            if wide {
                out.extend_from_slice(&[0u8; 8]);
                out.extend_from_slice(&offset.to_be_bytes());
                out.extend_from_slice(&(s.len() as u64).to_be_bytes());
                out.extend_from_slice(&[0u8; 8]);
            } else {
                out.extend_from_slice(&[0u8; 8]);
                out.extend_from_slice(&(offset as u32).to_be_bytes());
                out.extend_from_slice(&(s.len() as u32).to_be_bytes());
                out.extend_from_slice(&[0u8; 4]);
            }
            placed.push(offset);
            offset += (s.len() as u64).div_ceil(4096) * 4096;
        }
        for (s, at) in slices.iter().zip(placed) {
            out.resize(at as usize, 0);
            out.extend_from_slice(s);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::samples::{fat, thin};
    use super::*;

    #[test]
    fn thin_code_in_both_byte_orders_and_widths() {
        for ft in [MH_EXECUTE, MH_DYLIB, MH_DYLINKER, MH_BUNDLE] {
            assert!(is_code(&thin(ft, 100)), "filetype {ft}");
            // Byte-swapped (big-endian) and 32-bit forms.
            let mut be = vec![0u8; 64];
            be[..4].copy_from_slice(&0xfeed_face_u32.to_be_bytes());
            be[12..16].copy_from_slice(&ft.to_be_bytes());
            assert!(is_code(&be), "big-endian 32-bit filetype {ft}");
            be[3] = 0xcf;
            assert!(is_code(&be), "big-endian 64-bit filetype {ft}");
            let mut le32 = thin(ft, 64);
            le32[0] = 0xce;
            assert!(is_code(&le32), "little-endian 32-bit filetype {ft}");
        }
    }

    #[test]
    fn mach_o_that_is_never_executed_is_not_code() {
        // MH_OBJECT, MH_CORE, MH_DYLIB_STUB, MH_DSYM: a link action's .o files stay clones.
        for ft in [0x1, 0x4, 0x9, 0xa] {
            assert!(!is_code(&thin(ft, 100)), "filetype {ft}");
        }
        assert!(!is_code(b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x02\0"));
        assert!(!is_code(b"!<arch>\n"));
        assert!(!is_code(b""));
        assert!(!is_code(&[0xcf, 0xfa, 0xed])); // shorter than a header
    }

    #[test]
    fn universal_binaries_thin_and_wide() {
        let arm = thin(MH_DYLIB, 5000);
        let x86 = thin(MH_DYLIB, 3000);
        assert!(is_code(&fat(&[arm.clone(), x86.clone()], false)));
        assert!(is_code(&fat(&[arm.clone(), x86], true)));
        // A universal static library or object file is not code.
        let objs = fat(&[thin(0x1, 5000), thin(0x1, 3000)], false);
        assert!(!is_code(&objs));
        let ar = fat(&[b"!<arch>\n".repeat(10)], false);
        assert!(!is_code(&ar));
        // Truncated: a slice that runs past the end is not trusted.
        let whole = fat(&[arm], false);
        assert!(!is_code(&whole[..whole.len() - 1]));
    }

    #[test]
    fn java_class_files_are_not_universal_binaries() {
        // 0xcafebabe, minor 0, major 52 (Java 8): nfat_arch would be 52 (file(1): > 30 is
        // Java; LLVM: byte 7 >= 43 is not universal).
        let mut class = vec![0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 52];
        class.extend_from_slice(&[0u8; 200]);
        assert!(!is_code(&class));
        // Minor 3, major 45 (JDK 1.0.2/1.1): bytes 4..7 as a u32 is 0x0003002d.
        let mut old = vec![0xca, 0xfe, 0xba, 0xbe, 0, 3, 0, 45];
        old.extend_from_slice(&[0u8; 200]);
        assert!(!is_code(&old));
        // A class file whose first u32 after the magic happens to be small still fails the
        // slice checks (its "slices" point at no Mach-O header).
        let mut odd = vec![0xca, 0xfe, 0xba, 0xbe, 0, 0, 0, 2];
        odd.extend_from_slice(&[0x41u8; 9000]);
        assert!(!is_code(&odd));
    }

    #[test]
    fn streaming_in_any_chunking_agrees_with_one_buffer() {
        let f = fat(&[thin(MH_BUNDLE, 7000), thin(MH_BUNDLE, 100)], true);
        for chunk in [1usize, 3, 7, 13, 4096, 4097, 1 << 20] {
            let mut s = Sniffer::new();
            let mut r = Sniffing {
                inner: &f[..],
                sniffer: &mut s,
            };
            let mut buf = vec![0u8; chunk];
            loop {
                let n = std::io::Read::read(&mut r, &mut buf).unwrap();
                if n == 0 {
                    break;
                }
            }
            assert!(s.is_code(), "chunk {chunk}");
        }
    }
}
