"""Reader (and checksum) for specgen stored references (`.specref`, version 1).

Layout: bytes 0..7 `SPECREF1`; bytes 8..15 the header length H (uint64, little-endian); bytes
16..16+H the header (UTF-8 JSON); then the blobs, each at a file offset that is a multiple of 64.
A blob is one buffer's elements, row-major, little-endian, in the buffer's dtype. Each blob entry
of the header is {"offset", "bytes", "xxh3"}: XXH3-64 (seed 0) of the blob, 16 lowercase hex digits.
See docs/kernelbench.md.
"""

import ctypes
import ctypes.util
import json
import os
import struct

MAGIC = b"SPECREF1"
ALIGN = 64

# Task dtype -> (struct format character, element size).
DTYPES = {
    "f16": ("e", 2), "bf16": ("H", 2), "f32": ("f", 4), "f64": ("d", 8),
    "i8": ("b", 1), "u8": ("B", 1), "i32": ("i", 4), "i64": ("q", 8),
}


class SpecrefError(Exception):
    pass


_xxh3 = None


def xxhash_library():
    """The loaded libxxhash (SPECGEN_XXHASH_LIB overrides the path); SpecrefError if none loads."""
    global _xxh3
    if _xxh3 is not None:
        return _xxh3
    candidates = []
    if os.environ.get("SPECGEN_XXHASH_LIB"):
        candidates = [os.environ["SPECGEN_XXHASH_LIB"]]
    else:
        found = ctypes.util.find_library("xxhash")
        if found:
            candidates.append(found)
        candidates.append("libxxhash.so.0")
    errors = []
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
            fn = lib.XXH3_64bits
        except (OSError, AttributeError) as e:
            errors.append("%s: %s" % (name, e))
            continue
        fn.restype = ctypes.c_uint64
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        _xxh3 = fn
        return fn
    raise SpecrefError("cannot load libxxhash (XXH3_64bits) for the checksums: " + "; ".join(errors)
                       + " (install libxxhash0 or set SPECGEN_XXHASH_LIB to the library's path)")


def xxh3_hex(data):
    """XXH3-64 (seed 0) of a bytes-like object, as 16 lowercase hex digits."""
    fn = xxhash_library()
    mv = memoryview(data).cast("B")
    if len(mv) == 0:
        return "%016x" % fn(None, 0)
    buf = (ctypes.c_char * len(mv)).from_buffer(mv) if not mv.readonly else ctypes.create_string_buffer(bytes(mv), len(mv))
    return "%016x" % fn(ctypes.addressof(buf), len(mv))


def read_header(path):
    """The header of a stored reference, as a dict; SpecrefError if the file is not one."""
    with open(path, "rb") as f:
        head = f.read(16)
        if len(head) < 16 or head[:8] != MAGIC:
            raise SpecrefError("%s: not a stored reference (no SPECREF1 magic)" % path)
        (length,) = struct.unpack("<Q", head[8:16])
        size = os.fstat(f.fileno()).st_size
        if 16 + length > size:
            raise SpecrefError("%s: header length %d runs past the end of the file (%d bytes)" % (path, length, size))
        text = f.read(length)
    try:
        header = json.loads(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise SpecrefError("%s: header is not UTF-8 JSON: %s" % (path, e))
    if header.get("format") != "specgen-stored-reference" or header.get("version") != 1:
        raise SpecrefError("%s: header is not a version 1 specgen-stored-reference" % path)
    return header


def read_blob(path, entry, dtype, shape):
    """One blob ({"offset", "bytes", "xxh3"} from the header) as a flat list of numbers of dtype
    (a task dtype; bf16 gives the 16-bit patterns), checking its alignment, size and checksum.
    With torch available, read_tensor gives a tensor instead."""
    raw = read_blob_bytes(path, entry, dtype, shape)
    fmt, size = DTYPES[dtype]
    return list(struct.unpack("<%d%s" % (len(raw) // size, fmt), raw))


def read_blob_bytes(path, entry, dtype, shape):
    if dtype not in DTYPES:
        raise SpecrefError("unknown dtype %r" % (dtype,))
    count = 1
    for d in shape:
        count *= int(d)
    offset, nbytes = int(entry["offset"]), int(entry["bytes"])
    if offset % ALIGN:
        raise SpecrefError("%s: blob offset %d is not a multiple of %d" % (path, offset, ALIGN))
    if nbytes != count * DTYPES[dtype][1]:
        raise SpecrefError("%s: blob at %d holds %d bytes; %s%s needs %d"
                           % (path, offset, nbytes, dtype, list(shape), count * DTYPES[dtype][1]))
    size = os.path.getsize(path)
    if offset + nbytes > size:
        raise SpecrefError("%s: blob at %d (%d bytes) runs past the end of the file (%d bytes)" % (path, offset, nbytes, size))
    with open(path, "rb") as f:
        f.seek(offset)
        raw = f.read(nbytes)
    digest = xxh3_hex(raw)
    if digest != entry["xxh3"]:
        raise SpecrefError("%s: blob at %d: checksum %s, header says %s" % (path, offset, digest, entry["xxh3"]))
    return raw


def read_tensor(path, entry, dtype, shape):
    """The blob as a torch tensor of its dtype and shape (checked as read_blob checks)."""
    import torch
    raw = bytearray(read_blob_bytes(path, entry, dtype, shape))
    tdt = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64,
           "i8": torch.int8, "u8": torch.uint8, "i32": torch.int32, "i64": torch.int64}[dtype]
    if len(raw) == 0:
        return torch.empty([int(d) for d in shape], dtype=tdt)
    flat = torch.frombuffer(raw, dtype=torch.uint8).clone()
    return flat.view(tdt).reshape([int(d) for d in shape])
