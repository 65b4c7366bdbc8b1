"""The protobuf wire format, just what the test clients' REAPI messages need.

The Python clients of the suites (tests/transport, tests/compression, tests/reliability) are
independent of clonestage's Rust code on purpose: they encode and decode the few fields they
use by hand, so they need only grpcio, and share this one implementation. Import it with
tests/lib on sys.path.
"""

import struct


def varint(n):
    """A base-128 varint; a negative int64 as its two's complement (10 bytes)."""
    if n < 0:
        n += 1 << 64
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def read_varint(buf, i):
    """(value, next index) of the varint at buf[i]."""
    shift = 0
    v = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, i
        shift += 7


def f_varint(field, n):
    return varint(field << 3) + varint(int(n))


def f_bytes(field, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    return varint(field << 3 | 2) + varint(len(data)) + data


def decode(buf):
    """Decode one message into {field: [values]} (varints and fixed as int, length-delimited
    as bytes)."""
    out = {}
    i = 0
    n = len(buf)
    while i < n:
        key, i = read_varint(buf, i)
        field, wt = key >> 3, key & 7
        if wt == 0:
            v, i = read_varint(buf, i)
        elif wt == 2:
            ln, i = read_varint(buf, i)
            v = bytes(buf[i:i + ln])
            i += ln
        elif wt == 1:
            v = struct.unpack_from("<Q", buf, i)[0]
            i += 8
        elif wt == 5:
            v = struct.unpack_from("<I", buf, i)[0]
            i += 4
        else:
            raise ValueError("wire type %d in field %d" % (wt, field))
        out.setdefault(field, []).append(v)
    return out
