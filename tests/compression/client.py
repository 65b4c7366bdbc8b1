"""zstd compressed-blobs and digest functions against clonestage, with grpcio and zstandard.

Usage: client.py SOCKET BLOB_FILE

What Bazel 7+ does with --remote_cache_compression and --digest_function, from an independent
client (Bazel 4.2.3, the one installed here, has neither flag):

  capabilities   CacheCapabilities.supported_compressors holds ZSTD, digest_functions is
                 [SHA256] in both the cache and execution capabilities
  round trip     a blob (BLOB_FILE, e.g. the server's own executable: a build output) uploaded
                 as compressed-blobs/zstd in 16 KiB messages (Bazel's chunk size; offsets count
                 compressed bytes, committed_size must come back as the compressed total), then
                 read back compressed (decompresses to the blob) and plain (the same bytes)
  blake3         FindMissingBlobs with digest_function BLAKE3 and a ByteStream read of
                 blobs/blake3/... both get INVALID_ARGUMENT naming SHA256

Then the figures: bytes of message data on the wire and wall time for the blob uploaded and
downloaded plain vs zstd (level 3 on the client, what Bazel's zstd-jni uses by default), over
the unix socket. Messages come from the generated REAPI modules (tests/lib/pb.py).
Prints `compression: ...` lines; exits 1 on any failure.
"""

import hashlib
import os
import sys
import time

import grpc
import zstandard

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import pb  # noqa: E402

TIMEOUT = 120
CHUNK = 16 * 1024  # Bazel's Chunker default
V2, BS = pb.V2, pb.BS
SHA256, BLAKE3 = pb.re.DigestFunction.SHA256, pb.re.DigestFunction.BLAKE3
ZSTD = pb.re.Compressor.ZSTD


def write(ch, name, data):
    """Stream `data` in CHUNK messages; returns (committed_size, bytes sent)."""

    def reqs():
        for off in range(0, max(len(data), 1), CHUNK):
            piece = data[off : off + CHUNK]
            yield pb.bs.WriteRequest(
                resource_name=name if off == 0 else "", write_offset=off, finish_write=off + CHUNK >= len(data), data=piece
            )

    return pb.call(ch, BS + "Write", reqs(), TIMEOUT).committed_size


def read(ch, name):
    return b"".join(m.data for m in pb.call(ch, BS + "Read", pb.bs.ReadRequest(resource_name=name), TIMEOUT))


def expect_invalid(what, fn):
    try:
        fn()
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.INVALID_ARGUMENT or "SHA256" not in e.details():
            raise AssertionError(f"{what}: {e.code()} {e.details()}")
        return e.details()
    raise AssertionError(f"{what}: accepted")


def main():
    sock, blob_file = sys.argv[1], sys.argv[2]
    data = open(blob_file, "rb").read()
    failures = []

    def check(name, fn):
        try:
            detail = fn()
            print(f"  {name}: ok{' (' + detail + ')' if detail else ''}")
        except (grpc.RpcError, AssertionError) as e:
            msg = f"{e.code()} {e.details()}" if isinstance(e, grpc.RpcError) else str(e)
            print(f"  {name}: FAILED: {msg}")
            failures.append(name)

    with grpc.insecure_channel("unix:" + sock, options=[("grpc.max_receive_message_length", 64 << 20)]) as ch:

        def capabilities():
            caps = pb.call(ch, V2 + "Capabilities/GetCapabilities", pb.re.GetCapabilitiesRequest(), TIMEOUT)
            cache, execution = caps.cache_capabilities, caps.execution_capabilities
            got = (list(cache.supported_compressors), list(cache.digest_functions), list(execution.digest_functions))
            if got != ([ZSTD], [SHA256], [SHA256]):
                raise AssertionError(f"supported_compressors, digest_functions (cache, exec): {got}")
            return "supported_compressors [ZSTD], digest_functions [SHA256]"

        def round_trip():
            blob = b"round trip\n" + data
            h = hashlib.sha256(blob).hexdigest()
            z = zstandard.ZstdCompressor(level=3).compress(blob)
            committed = write(ch, f"uploads/e2e-rt/compressed-blobs/zstd/{h}/{len(blob)}", z)
            if committed != len(z):
                raise AssertionError(f"committed_size {committed}, sent {len(z)} compressed bytes")
            zback = read(ch, f"compressed-blobs/zstd/{h}/{len(blob)}")
            got = zstandard.ZstdDecompressor().decompressobj().decompress(zback)
            if got != blob:
                raise AssertionError(f"compressed read decompresses to {len(got)} bytes, not the blob")
            plain = read(ch, f"blobs/{h}/{len(blob)}")
            if plain != blob:
                raise AssertionError(f"plain read returned {len(plain)} bytes, not the blob")
            # Again: the server now holds it, a compressed Write answers -1 (REAPI).
            again = write(ch, f"uploads/e2e-rt2/compressed-blobs/zstd/{h}/{len(blob)}", z)
            if again != -1:
                raise AssertionError(f"second compressed write: committed_size {again}, not -1")
            return f"{len(blob)} bytes, {len(z)} up, {len(zback)} down compressed"

        def blake3():
            req = pb.re.FindMissingBlobsRequest(blob_digests=[pb.digest(b"x")], digest_function=BLAKE3)
            a = expect_invalid("FindMissingBlobs", lambda: pb.call(ch, V2 + "ContentAddressableStorage/FindMissingBlobs", req, TIMEOUT))
            h = hashlib.sha256(b"x").hexdigest()
            b = expect_invalid("Read blobs/blake3", lambda: read(ch, f"blobs/blake3/{h}/1"))
            return f"'{a}'; '{b}'"

        check("capabilities", capabilities)
        check("round trip", round_trip)
        check("blake3 refused", blake3)

        # The figures: one upload and one download of the blob each way.
        def timed(fn):
            t = time.perf_counter()
            r = fn()
            return r, time.perf_counter() - t

        try:
            rows = []
            for mode in ("plain", "zstd"):
                blob = f"figure {mode}\n".encode() + data
                h = hashlib.sha256(blob).hexdigest()
                if mode == "plain":
                    _, up = timed(lambda: write(ch, f"uploads/fig-p/blobs/{h}/{len(blob)}", blob))
                    sent = len(blob)
                    back, down = timed(lambda: read(ch, f"blobs/{h}/{len(blob)}"))
                    got = back
                else:

                    def up_z():
                        z = zstandard.ZstdCompressor(level=3).compress(blob)
                        write(ch, f"uploads/fig-z/compressed-blobs/zstd/{h}/{len(blob)}", z)
                        return len(z)

                    sent, up = timed(up_z)

                    def down_z():
                        zb = read(ch, f"compressed-blobs/zstd/{h}/{len(blob)}")
                        return zb, zstandard.ZstdDecompressor().decompressobj().decompress(zb)

                    (back, got), down = timed(down_z)
                if got != blob:
                    raise AssertionError(f"{mode}: read back {len(got)} bytes, not the blob")
                rows.append((mode, sent, up, len(back), down))
            size = len(data)
            for mode, sent, up, recv, down in rows:
                print(
                    f"compression: figure {mode}: {size / 1e6:.1f} MB blob; upload {sent / 1e6:.1f} MB on the wire "
                    f"in {up:.2f} s; download {recv / 1e6:.1f} MB in {down:.2f} s"
                )
            (_, ps, pu, pr, pd), (_, zs, zu, zr, zd) = rows
            print(
                f"compression: figure ratio: zstd/plain bytes up {zs / ps:.2f}, down {zr / pr:.2f}; "
                f"time up {zu / pu:.2f}x, down {zd / pd:.2f}x"
            )
        except (grpc.RpcError, AssertionError) as e:
            print(f"  figures: FAILED: {e}")
            failures.append("figures")

    print(f"compression: {3 - len([f for f in failures if f != 'figures'])}/3 checks ok over unix:{sock}" + (f"; FAILED: {', '.join(failures)}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
