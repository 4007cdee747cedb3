"""/metrics on every role: `sluice worker` and `sluice store-node` with --metrics-port."""

import json
import re
import socket
import subprocess
import time
import urllib.request

import pytest

from conftest import SLUICE_BIN, Proc


def scrape(endpoint):
    """{(name, frozenset of label pairs): value} of one /metrics page."""
    body = urllib.request.urlopen(f"http://{endpoint}/metrics", timeout=5).read().decode()
    out = {}
    for line in body.splitlines():
        if line.startswith("#") or not line:
            continue
        m = re.fullmatch(r'([a-z_]+)(?:\{(.*)\})? (\S+)', line)
        assert m, f"not a sample line: {line!r}"
        labels = frozenset(re.findall(r'([a-z_]+)="([^"]*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())))


@pytest.fixture(scope="module")
def cluster():
    # One store node, so every object the job leaves is on the one scraped.
    master = Proc([SLUICE_BIN, "master", "--listen", "127.0.0.1:0", "--exit-on-stdin-eof"])
    store = master.words[2]
    node = Proc([SLUICE_BIN, "store-node", "--master", store, "--memory", "64MiB",
                 "--metrics-port", "0", "--exit-on-stdin-eof"])
    orch = Proc([SLUICE_BIN, "orchestrator", "--store-master", store, "--exit-on-stdin-eof"])
    workers = {stage: Proc([SLUICE_BIN, "worker", "--stage", stage, "--orchestrator",
                            orch.words[2], "--master", store, "--metrics-port", "0",
                            "--exit-on-stdin-eof"])
               for stage in ("encode", "denoise", "decode")}
    yield {"http": orch.words[3], "grpc": orch.words[2], "master": store, "node": node,
           "workers": workers}
    for p in [*workers.values(), orch, node, master]:
        p.close()


def test_workers_and_store_nodes_serve_their_own_metrics(cluster):
    req = urllib.request.Request(f"http://{cluster['http']}/v1/images/generations",
                                 data=json.dumps({"prompt": "a red circle on the left"}).encode(),
                                 method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200

    stages = {}
    for stage, w in cluster["workers"].items():
        assert w.words[:3] == ["READY", "worker", stage]
        m = scrape(w.words[4])
        stages[stage] = m
        assert value(m, "sluice_worker_done_total", stage=stage) == 1, stage
        assert value(m, "sluice_worker_running", stage=stage) == 0, stage
        assert value(m, "sluice_worker_capacity", stage=stage) == 1, stage
        assert value(m, "sluice_worker_run_seconds_count", stage=stage) == 1, stage
        assert value(m, "sluice_worker_run_seconds_sum", stage=stage) > 0, stage
        assert value(m, "sluice_worker_run_seconds_bucket", stage=stage, le="+Inf") == 1, stage
    # The reference denoiser's 12 steps; the encoder's two texts through its
    # condition cache; the latent written by denoise and read by decode.
    assert value(stages["denoise"], "sluice_worker_steps_total", stage="denoise") == 12
    step_count = value(stages["denoise"], "sluice_worker_step_seconds_count", stage="denoise")
    step_sum = value(stages["denoise"], "sluice_worker_step_seconds_sum", stage="denoise")
    run_sum = value(stages["denoise"], "sluice_worker_run_seconds_sum", stage="denoise")
    assert step_count == 12 and 0 < step_sum <= run_sum, (step_count, step_sum, run_sum)
    assert value(stages["encode"], "sluice_worker_cache_lookups_total", stage="encode",
                 kind="condition") == 2
    assert value(stages["encode"], "sluice_worker_cache_computes_total", stage="encode",
                 kind="condition") == 2
    written = sum(v for (n, l), v in stages["denoise"].items()
                  if n == "sluice_engine_bytes_total" and ("direction", "write") in l)
    read = sum(v for (n, l), v in stages["decode"].items()
               if n == "sluice_engine_bytes_total" and ("direction", "read") in l)
    assert written > 0 and read > 0, (written, read)
    # Payloads through each worker's connector: what a stage published the
    # next consumed, byte for byte. The encoder's conditions go through its
    # condition cache instead (cache bytes above), and decode's output is
    # the job's result, not a payload.
    def payloads(stage, direction):
        return (value(stages[stage], "sluice_worker_payloads_total", stage=stage,
                      direction=direction),
                value(stages[stage], "sluice_worker_payload_bytes_total", stage=stage,
                      direction=direction))
    for stage, direction in (("encode", "in"), ("encode", "out"), ("denoise", "in"),
                             ("decode", "out")):
        assert payloads(stage, direction) == (0, 0), (stage, direction)
    dn_out, dec_in = payloads("denoise", "out"), payloads("decode", "in")
    assert dn_out[0] == 1 and dn_out[1] > 0 and dn_out == dec_in, (dn_out, dec_in)

    node = cluster["node"]
    assert node.words[:2] == ["READY", "store-node"]
    deadline = time.time() + 10
    while True:  # Held objects as of the node's next heartbeat answer.
        m = scrape(node.words[4])
        if value(m, "sluice_store_node_objects", policy="cache", **{"class": "condition"}):
            break
        assert time.time() < deadline, "the node never listed the cached conditions"
        time.sleep(0.05)
    assert value(m, "sluice_store_node_capacity_bytes", tier="memory") == 64 << 20
    assert value(m, "sluice_store_node_registered") == 1
    assert value(m, "sluice_store_node_objects", policy="cache", **{"class": "condition"}) == 2
    assert value(m, "sluice_store_node_bytes", policy="cache", tier="memory",
                 **{"class": "condition"}) > 0


def test_a_bad_or_taken_metrics_port_is_refused_by_name(cluster):
    bad = subprocess.run([SLUICE_BIN, "store-node", "--master", "127.0.0.1:1", "--metrics-port",
                          "70000"], capture_output=True, text=True, timeout=30)
    assert bad.returncode != 0
    assert "--metrics-port" in bad.stderr, bad.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = subprocess.run([SLUICE_BIN, "worker", "--stage", "encode", "--orchestrator",
                               cluster["grpc"], "--master", cluster["master"], "--metrics-port",
                               str(port)], capture_output=True, text=True, timeout=60)
    assert busy.returncode == 2, busy.stderr
    assert "--metrics-port" in busy.stderr and "cannot listen" in busy.stderr, busy.stderr
