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
