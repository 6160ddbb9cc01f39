"""st_io.py - minimal safetensors reader/writer with numpy (Debian has no python3-safetensors).

Format (safetensors spec): u64 little-endian N, then N bytes of UTF-8 JSON
  {"__metadata__": {...}, "<name>": {"dtype": "BF16", "shape": [..], "data_offsets": [b, e]}, ...}
then the data section; offsets are relative to its start.  We pad the header with spaces to a
multiple of 8 bytes, as the reference implementation does, and lay tensors out in name order.
BF16 has no numpy dtype: it travels as uint16 bit patterns (top half of the float32 bits).
"""
import json
import os
import struct

import numpy as np

_NP = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64,
       "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def f32_to_bf16_bits(a):
    """Round-to-nearest-even float32 -> bfloat16 bit patterns (uint16)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def bf16_bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def encode(arr_f32, dtype):
    """float32 array -> (dtype name, raw numpy array in that dtype)."""
    if dtype == "BF16":
        return f32_to_bf16_bits(arr_f32)
    return np.ascontiguousarray(arr_f32, dtype=_NP[dtype])


def write_file(path, tensors, metadata=None):
    """tensors: dict name -> (dtype name, numpy array already in that dtype / uint16 for BF16)."""
    header = {"__metadata__": metadata or {"format": "pt"}}
    offset = 0
    names = sorted(tensors)
    for name in names:
        dt, arr = tensors[name]
        nbytes = arr.nbytes
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for name in names:
            f.write(np.ascontiguousarray(tensors[name][1]).tobytes())


def read_file(path):
    """Returns dict name -> float32 numpy array (any of F32/F16/BF16)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + n].decode("utf-8"))
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        raw = np.frombuffer(data[base + b:base + e], dtype=_NP[info["dtype"]])
        arr = bf16_bits_to_f32(raw) if info["dtype"] == "BF16" else raw.astype(np.float32)
        out[name] = arr.reshape(info["shape"])
    return out


def read_dir(hf_dir):
    """All tensors of an HF folder: model.safetensors or the shards named in the index."""
    index = os.path.join(hf_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        out.update(read_file(os.path.join(hf_dir, fn)))
    return out
