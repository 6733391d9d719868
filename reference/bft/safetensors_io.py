"""Minimal .safetensors reader/writer (torch + numpy only) shared by the
reference scripts in reference/{bft,rt,afa}. Written in this project."""

import json
import struct

import numpy as np
import torch

_NP = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def load(path):
    """Return {name: torch.Tensor} for the tensors of a .safetensors file."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        blob = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        arr = np.frombuffer(blob[lo:hi], dtype=_NP[info["dtype"]]).reshape(info["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out


_KEEP = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}


def save(path, tensors, keep_dtypes=False):
    """Write {name: tensor} as float32 .safetensors; with keep_dtypes, float64
    and int64 tensors keep their dtype (checkpoint buffers such as RFA's
    t_measure) and only other dtypes become float32."""
    header, chunks, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous()
        if not (keep_dtypes and t.dtype in _KEEP):
            t = t.to(torch.float32)
        raw = t.numpy().tobytes()
        header[name] = {"dtype": _KEEP[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)
