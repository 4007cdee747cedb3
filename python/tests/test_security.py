"""The cluster credential from Python: StageWorker and DiffusionConnector take
it as a keyword or from SLUICE_CLUSTER_TOKEN_FILE, and are refused without it."""

import os
import subprocess
import time

import numpy as np
import pytest

import sluice
from sluice import StageWorker
from sluice.diffusion import DiffusionConnector, StagePayload

from conftest import SLUICE_BIN, Proc


@pytest.fixture
def token(tmp_path):
    path = tmp_path / "token"
    path.write_text("9d3f8c1a2b4e6f70819a2b3c4d5e6f70\n")
    path.chmod(0o600)
    wrong = tmp_path / "wrong"
    wrong.write_text("00000000000000000000000000000000\n")
    wrong.chmod(0o600)
    return str(path), str(wrong)


@pytest.fixture
def closed_cluster(token):
    good, _ = token
    master = Proc([SLUICE_BIN, "master", "--metrics-port", "0", "--cluster-token", good,
                   "--exit-on-stdin-eof"])
    node = Proc([SLUICE_BIN, "store-node", "--master", master.words[2], "--memory", "64MiB",
                 "--cluster-token", good, "--exit-on-stdin-eof"])
    orch = Proc([SLUICE_BIN, "orchestrator", "--cluster-token", good, "--exit-on-stdin-eof"])
    yield master.words[2], orch.words[2]
    for p in (orch, node, master):
        p.close()


def test_a_worker_registers_only_with_the_cluster_token(closed_cluster, token, monkeypatch):
    _, orchestrator = closed_cluster
    good, wrong = token
    monkeypatch.delenv("SLUICE_CLUSTER_TOKEN_FILE", raising=False)
    handler = lambda ctx: b""  # noqa: E731
    with StageWorker("encode", orchestrator, handler) as w:
        assert not w.wait_registered(1.0), "registered without the token"
    with StageWorker("encode", orchestrator, handler, cluster_token_file=wrong) as w:
        assert not w.wait_registered(1.0), "registered with a wrong token"
    with StageWorker("encode", orchestrator, handler, cluster_token_file=good) as w:
        assert w.wait_registered(10.0)
    monkeypatch.setenv("SLUICE_CLUSTER_TOKEN_FILE", good)
    with StageWorker("decode", orchestrator, handler) as w:
        assert w.wait_registered(10.0), "the environment names the token file"


def test_bad_credential_arguments_are_typed_errors(token, tmp_path):
    with pytest.raises(sluice.InvalidArgumentError, match="cluster_token_file"):
        StageWorker("encode", "127.0.0.1:1", lambda ctx: b"", cluster_token_file=3)
    short = tmp_path / "short"
    short.write_text("abc")
    with pytest.raises(sluice.InvalidArgumentError, match="16..4096 bytes"):
        DiffusionConnector(role="encode", cluster_token_file=str(short))
    with pytest.raises(sluice.InvalidArgumentError, match="cannot be read"):
        DiffusionConnector(role="encode", cluster_token_file=str(tmp_path / "missing"))


def test_the_connector_moves_payloads_only_with_the_cluster_token(closed_cluster, token,
                                                                  monkeypatch):
    master, _ = closed_cluster
    good, wrong = token
    monkeypatch.delenv("SLUICE_CLUSTER_TOKEN_FILE", raising=False)
    data = np.arange(4096, dtype=np.float32)
    producer = DiffusionConnector(role="encode", transfer_mode="store",
                                  store_config={"master": master}, cluster_token_file=good)
    consumer = DiffusionConnector(role="denoise", transfer_mode="store",
                                  store_config={"master": master}, cluster_token_file=good)
    handle = producer.publish(StagePayload(request_id="r1", kind="latent", tensor=data))
    handle.wait(10)
    dst = np.zeros_like(data)
    for _ in consumer.consume(handle.descriptor(), dst):
        pass
    assert np.array_equal(dst, data)

    for kwargs in ({}, {"cluster_token_file": wrong}):
        stranger = DiffusionConnector(role="encode", transfer_mode="store",
                                      store_config={"master": master, "rpc_timeout_ms": 2000},
                                      **kwargs)
        h = stranger.publish(StagePayload(request_id="r2", kind="latent", tensor=data))
        with pytest.raises(sluice.UnauthenticatedError):
            h.wait(10)
        stranger.close()
    producer.close()
    consumer.close()


def _derive(role, token_file, out):
    subprocess.run([SLUICE_BIN, "token", "derive", "--role", role, "--cluster-token", token_file,
                    "--out", str(out)], check=True, capture_output=True, timeout=30)
    return str(out)


def test_role_credentials_open_their_roles_calls_only(closed_cluster, token, tmp_path,
                                                      monkeypatch):
    master, orchestrator = closed_cluster
    good, _ = token
    monkeypatch.delenv("SLUICE_CLUSTER_TOKEN_FILE", raising=False)
    worker_cred = _derive("worker", good, tmp_path / "worker.cred")
    client_cred = _derive("client", good, tmp_path / "client.cred")
    node_cred = _derive("node", good, tmp_path / "node.cred")
    handler = lambda ctx: b""  # noqa: E731
    with StageWorker("encode", orchestrator, handler, role_credential_file=worker_cred) as w:
        assert w.wait_registered(10.0), "a worker's credential registers a worker"
    with StageWorker("encode", orchestrator, handler, role_credential_file=node_cred) as w:
        assert not w.wait_registered(1.0), "a node's credential registered a worker"

    data = np.arange(1024, dtype=np.float32)
    producer = DiffusionConnector(role="encode", transfer_mode="store",
                                  store_config={"master": master},
                                  role_credential_file=client_cred)
    handle = producer.publish(StagePayload(request_id="r3", kind="latent", tensor=data))
    handle.wait(10)
    dst = np.zeros_like(data)
    consumer = DiffusionConnector(role="denoise", transfer_mode="store",
                                  store_config={"master": master}, cluster_token_file=good)
    for _ in consumer.consume(handle.descriptor(), dst):
        pass
    assert np.array_equal(dst, data)
    with pytest.raises(sluice.InvalidArgumentError, match="not both"):
        DiffusionConnector(role="encode", cluster_token_file=good, role_credential_file=client_cred)
    producer.close()
    consumer.close()
