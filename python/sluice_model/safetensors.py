"""The safetensors format, read and written by hand (no package offers it here).

A file is an 8-byte little-endian header length N, N bytes of a JSON object
{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{str: str}}, then the tensors' bytes; offsets count from the end of the
header. This writer sorts tensors by name, packs them back to back, pads
the header with spaces so the data starts 8-byte aligned, and writes only
little-endian float32 ("F32"), the one dtype sluice's C++ loader takes.
"""

import json
import struct
from typing import Dict, Mapping, Tuple

import numpy as np

_ALIGN = 8


def save(path: str, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str] = ()) -> None:
    """Writes `tensors` (each converted to contiguous little-endian f32)."""
    header: Dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in dict(metadata).items()}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(np.asarray(tensors[name], dtype="<f4"))
        raw = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-(8 + len(text))) % _ALIGN)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


def load(path: str) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """(tensors, metadata) of an F32 safetensors file; ValueError naming the
    problem on a malformed one."""
    with open(path, "rb") as f:
        return loads(f.read(), path)


def loads(data: bytes, path: str = "bytes") -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
    """load() of a file's bytes; `path` names them in errors."""
    if len(data) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: header of {n} bytes runs past the end")
    header = json.loads(data[8:8 + n])
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not a JSON object")
    body = memoryview(data)[8 + n:]
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        if info.get("dtype") != "F32":
            raise ValueError(f"{path}: tensor {name}: dtype {info.get('dtype')}, not F32")
        begin, end = info["data_offsets"]
        shape = tuple(int(s) for s in info["shape"])
        if end > len(body) or end - begin != 4 * int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{path}: tensor {name}: offsets disagree with its shape")
        tensors[name] = np.frombuffer(body[begin:end], dtype="<f4").reshape(shape).copy()
    return tensors, dict(metadata)
