"""A producer process for the Python connector tests.

usage: producer.py MODE LIB DIM CHUNKS [MASTER] [--progressive-ms N] [--shared]
Publishes one bf16 (torch) or f32 (numpy) tensor of shape (8, 4, 16, 6, 10)
whose values are a function of their index, prints "READY <descriptor hex>
<endpoint>", then marks chunks ready (progressive) and waits for stdin to close.
--shared publishes from a tensor conn.empty() allocated.
"""

import sys
import time

from sluice.diffusion import DiffusionConnector, StagePayload

SHAPE = (8, 4, 16, 6, 10)


def make(lib):
    if lib == "torch":
        import torch

        n = 1
        for d in SHAPE:
            n *= d
        return (torch.arange(n, dtype=torch.float32) % 251).reshape(SHAPE).to(torch.bfloat16)
    import numpy as np

    return (np.arange(np.prod(SHAPE), dtype=np.float32) * 0.5).reshape(SHAPE)


def main():
    mode, lib, dim, chunks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    master = sys.argv[5] if len(sys.argv) > 5 and not sys.argv[5].startswith("--") else None
    progressive_ms = None
    if "--progressive-ms" in sys.argv:
        progressive_ms = int(sys.argv[sys.argv.index("--progressive-ms") + 1])
    conn = DiffusionConnector(role="denoise", transfer_mode=mode,
                              store_config={"master": master} if master else None)
    t = make(lib)
    if "--shared" in sys.argv:
        shared = conn.empty(SHAPE, t.dtype)
        shared[...] = t
        t = shared
    h = conn.publish(StagePayload(request_id="py-req", kind="latent", tensor=t,
                                  chunk_dim=None if dim < 0 else dim, num_chunks=chunks,
                                  progressive=progressive_ms is not None))
    if mode == "store" and progressive_ms is None:
        h.wait(30)
    print("READY", h.descriptor().hex(), conn.endpoint, flush=True)
    if progressive_ms is not None:
        for i in range(chunks):
            time.sleep(progressive_ms / 1000)
            h.mark_ready(i)
    sys.stdin.read()


if __name__ == "__main__":
    main()
