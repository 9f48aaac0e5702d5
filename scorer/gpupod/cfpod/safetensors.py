"""A safetensors reader and writer that needs nothing but the standard library and torch
(no numpy: torch 2.x wheels do not bring it).

Format: an 8-byte little-endian header length, a JSON header mapping tensor names to
{"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the data section),
then the data. The reader validates every entry before any tensor is built: the byte
range lies inside the data section, matches dtype x shape, and overlaps no other tensor.
Weights can be F32, F16 or BF16; other dtypes are accepted in headers (so checkpoints that
carry extra buffers still open) but cannot be loaded as weights.
"""

import json
import mmap
import os
import struct
import sys

import torch

MAX_HEADER_BYTES = 100 << 20

DTYPE_SIZES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U8": 1, "BOOL": 1, "U16": 2, "U32": 4, "U64": 8, "F8_E4M3": 1, "F8_E5M2": 1,
}

WEIGHT_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


class SafetensorsError(ValueError):
    """A safetensors file is malformed or a tensor cannot be used; the message names the
    file and the tensor."""


class Entry:
    __slots__ = ("path", "name", "dtype", "shape", "begin", "end")

    def __init__(self, path, name, dtype, shape, begin, end):
        self.path, self.name, self.dtype, self.shape = path, name, dtype, shape
        self.begin, self.end = begin, end  # absolute file offsets


def parse_header(path):
    """Reads and validates the header of one file; returns {name: Entry}."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise SafetensorsError(
                f"safetensors {path}: file too short for the 8-byte header length ({size} bytes): "
                "truncated or not a safetensors file")
        (hlen,) = struct.unpack("<Q", head)
        if hlen > MAX_HEADER_BYTES or hlen > size - 8:
            raise SafetensorsError(
                f"safetensors {path}: header length {hlen} does not fit the file ({size} bytes): "
                "truncated or corrupt file")
        raw = f.read(hlen)
    try:
        hdr = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"safetensors {path}: header is not a JSON object: {e}") from None
    if not isinstance(hdr, dict):
        raise SafetensorsError(f"safetensors {path}: header is not a JSON object")
    data_start = 8 + hlen
    data_len = size - data_start
    out = {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        if not isinstance(e, dict):
            raise SafetensorsError(f"safetensors {path}: tensor {name!r}: bad header entry")
        dtype, shape, offs = e.get("dtype"), e.get("shape"), e.get("data_offsets")
        if dtype not in DTYPE_SIZES:
            raise SafetensorsError(f"safetensors {path}: tensor {name!r}: unknown dtype {dtype!r}")
        if not isinstance(offs, list) or len(offs) != 2 or not all(isinstance(o, int) for o in offs):
            raise SafetensorsError(
                f"safetensors {path}: tensor {name!r}: data_offsets must be 2 integers, got {offs!r}")
        if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
            raise SafetensorsError(f"safetensors {path}: tensor {name!r}: shape must be a list of integers")
        b, en = offs
        if b < 0 or en < b or en > data_len:
            raise SafetensorsError(
                f"safetensors {path}: tensor {name!r}: data_offsets [{b}, {en}] outside the data "
                f"section ({data_len} bytes): truncated or corrupt file")
        n = 1
        for d in shape:
            if d < 0:
                raise SafetensorsError(f"safetensors {path}: tensor {name!r}: negative dimension in shape {shape}")
            n *= d
        if n * DTYPE_SIZES[dtype] != en - b:
            raise SafetensorsError(
                f"safetensors {path}: tensor {name!r}: shape {shape} of {dtype} needs "
                f"{n * DTYPE_SIZES[dtype]} bytes but data_offsets give {en - b}")
        out[name] = Entry(path, name, dtype, list(shape), data_start + b, data_start + en)
    ordered = sorted(out.values(), key=lambda x: x.begin)
    for prev, cur in zip(ordered, ordered[1:]):
        if cur.begin < prev.end:
            raise SafetensorsError(
                f"safetensors {path}: tensors {prev.name!r} and {cur.name!r} overlap in the data section")
    return out


class TensorSet:
    """The union of the tensors of every *.safetensors file of a folder (no index file
    needed). Tensors are read through a memory map, one at a time."""

    def __init__(self, folder):
        files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
        if not files:
            raise SafetensorsError(f"no *.safetensors files in {folder}")
        self.entries = {}
        for fn in files:
            p = os.path.join(folder, fn)
            for name, e in parse_header(p).items():
                if name in self.entries:
                    raise SafetensorsError(
                        f"tensor {name!r} appears in both {self.entries[name].path} and {p}")
                self.entries[name] = e
        self._maps = {}

    def has(self, name):
        return name in self.entries

    def close(self):
        for f, m in self._maps.values():
            m.close()
            f.close()
        self._maps = {}

    def _map(self, path):
        if path not in self._maps:
            f = open(path, "rb")
            self._maps[path] = (f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        return self._maps[path][1]

    def load(self, name, shape, dtype=torch.float32, device="cpu"):
        """Returns tensor name converted to dtype on device; its shape must equal shape."""
        e = self.entries.get(name)
        if e is None:
            raise SafetensorsError(f"tensor {name!r} is missing from the checkpoint")
        if list(shape) != e.shape:
            raise SafetensorsError(
                f"safetensors {e.path}: tensor {name!r} has shape {e.shape}, the config needs {list(shape)}")
        src = WEIGHT_DTYPES.get(e.dtype)
        if src is None:
            raise SafetensorsError(
                f"safetensors {e.path}: tensor {name!r}: dtype {e.dtype} cannot be loaded as weights "
                "(want F32, F16 or BF16)")
        buf = bytearray(self._map(e.path)[e.begin:e.end])
        if src == torch.bfloat16:
            # Widen to float32 bit patterns: exact, and independent of frombuffer's bf16 support.
            t = (torch.frombuffer(buf, dtype=torch.int16).to(torch.int32) << 16).view(torch.float32)
        elif len(buf) == 0:
            t = torch.zeros(0, dtype=src)
        else:
            t = torch.frombuffer(buf, dtype=src)
        return t.reshape(e.shape).to(device=device, dtype=dtype)


def tensor_bytes(t):
    """The bytes of a contiguous CPU tensor in the machine's order (little-endian on every
    platform torch ships for), without numpy: copied into a bytearray through a uint8 view."""
    if sys.byteorder != "little":
        raise SafetensorsError("safetensors are little-endian; writing them on a big-endian machine is not supported")
    n = t.numel() * t.element_size()
    if n == 0:
        return b""
    buf = bytearray(n)
    torch.frombuffer(buf, dtype=torch.uint8).copy_(t.reshape(-1).view(torch.uint8))
    return bytes(buf)


def write(path, tensors, dtype="F32"):
    """Writes {name: tensor} to path in dtype (F32, F16 or BF16); for tests and tools."""
    if dtype not in WEIGHT_DTYPES:
        raise ValueError(f"dtype {dtype!r} not supported (want F32, F16 or BF16)")
    tdt = WEIGHT_DTYPES[dtype]
    hdr = {"__metadata__": {"format": "pt"}}
    blobs = []
    off = 0
    for name, t in tensors.items():
        t = t.detach().to("cpu", tdt).contiguous()
        raw = tensor_bytes(t)
        hdr[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hj = json.dumps(hdr).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
