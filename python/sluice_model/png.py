"""A minimal PNG writer (8-bit RGB, no filtering) for sample grids and plots."""

import struct
import zlib

import numpy as np


def encode(rgb: np.ndarray) -> bytes:
    """PNG bytes of uint8 [h, w, 3]."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + np.ascontiguousarray(rgb[y]).tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def grid(images, columns: int, pad: int = 2) -> np.ndarray:
    """The images (each uint8 [h, w, 3], all one size) in rows of `columns`."""
    h, w, _ = images[0].shape
    rows = (len(images) + columns - 1) // columns
    out = np.full((rows * (h + pad) + pad, columns * (w + pad) + pad, 3), 255, np.uint8)
    for i, im in enumerate(images):
        y, x = pad + (i // columns) * (h + pad), pad + (i % columns) * (w + pad)
        out[y:y + h, x:x + w] = im
    return out


def decode(data: bytes) -> np.ndarray:
    """uint8 [h, w, 3] of an 8-bit RGB, non-interlaced PNG (what sluice and
    `encode` write), with every row filter; ValueError otherwise."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, size = 8, b"", None
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body[:13])
            if depth != 8 or colour != 2 or interlace != 0:
                raise ValueError("not 8-bit RGB, non-interlaced")
            size = (h, w)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    if size is None:
        raise ValueError("no IHDR")
    h, w = size
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + 3 * w)
    out = np.zeros((h, 3 * w), np.int32)
    prev = np.zeros(3 * w, np.int32)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if f == 0:
            row = line
        elif f == 2:  # Up
            row = (line + prev) & 0xFF
        else:  # Sub, Average, Paeth depend on the reconstructed left byte.
            row = np.zeros(3 * w, np.int32)
            for i in range(3 * w):
                a = row[i - 3] if i >= 3 else 0
                b = prev[i]
                c = prev[i - 3] if i >= 3 else 0
                if f == 1:
                    pred = a
                elif f == 3:
                    pred = (a + b) // 2
                elif f == 4:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                else:
                    raise ValueError(f"unknown PNG filter {f}")
                row[i] = (line[i] + pred) & 0xFF
        out[y] = row
        prev = row
    return out.astype(np.uint8).reshape(h, w, 3)
