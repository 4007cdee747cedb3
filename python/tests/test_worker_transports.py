"""`sluice worker --transports`: a decode worker running tcp and ucx (no
shm) reads its latents from a store node that runs ucx too, over ucx, as
the orchestrator's per-stage transport counters show; an unknown name is
refused by the flag."""

import json
import subprocess
import time
import urllib.request

from conftest import SLUICE_BIN, Proc, Store


def transfer_bytes(http: str, stage: str, transport: str, direction: str) -> float:
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    want = (f'sluice_worker_transfer_bytes_total{{stage="{stage}",transport="{transport}",'
            f'direction="{direction}"}}')
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(want))


def test_a_worker_reads_its_input_over_ucx_when_told_to():
    store = Store(node_args=["--transports", "tcp,shm,ucx"])
    procs = []
    try:
        orch = Proc([SLUICE_BIN, "orchestrator", "--store-master", store.endpoint,
                     "--exit-on-stdin-eof"])
        procs.append(orch)
        grpc, http = orch.words[2], orch.words[3]
        for stage, extra in (("encode", []), ("denoise", []),
                             ("decode", ["--transports", "tcp,ucx"])):
            procs.append(Proc([SLUICE_BIN, "worker", "--stage", stage, "--orchestrator", grpc,
                               "--master", store.endpoint, *extra, "--exit-on-stdin-eof"]))
        req = urllib.request.Request(
            f"http://{http}/v1/images/generations", method="POST",
            data=json.dumps({"prompt": "a red circle", "size": "128x128", "steps": 4}).encode())
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.status == 200
            assert json.loads(r.read())["data"][0]["b64_json"]
        # The decode worker's engine read the 4x32x32 latent over ucx (its
        # counters reach the orchestrator with its next heartbeat).
        deadline = time.monotonic() + 10
        while transfer_bytes(http, "decode", "ucx", "read") < 4 * 32 * 32 * 4:
            assert time.monotonic() < deadline, "no bytes read over ucx by the decode worker"
            time.sleep(0.1)
        assert transfer_bytes(http, "decode", "shm", "read") == 0
    finally:
        for p in reversed(procs):
            p.close()
        store.close()


def test_an_unknown_transport_is_refused_by_the_flag():
    r = subprocess.run([SLUICE_BIN, "worker", "--stage", "decode", "--orchestrator",
                        "127.0.0.1:1", "--transports", "tcp,rdma"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r
    assert "--transports: rdma not in {tcp,shm,ucx}" in r.stderr, r.stderr
