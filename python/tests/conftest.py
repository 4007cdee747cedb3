"""Fixtures: a store master and a store node as processes, producer processes."""

import json
import os
import pathlib
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SLUICE_BIN = os.environ.get("SLUICE_BIN", str(ROOT / "build" / "bin" / "sluice"))
PRODUCER = str(pathlib.Path(__file__).with_name("producer.py"))


def post_image(http, body, timeout=30):
    """(status, parsed JSON) of POST /v1/images/generations with `body` at
    the orchestrator's HTTP address `http`, an error status included."""
    req = urllib.request.Request(f"http://{http}/v1/images/generations",
                                 data=json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


class Proc:
    """A child whose first stdout line starts with READY; killed on close."""

    def __init__(self, argv, env=None, stderr=None):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env=env, stderr=stderr)
        self.words = self.p.stdout.readline().split()
        assert self.words and self.words[0] == "READY", f"{argv[:3]} did not start: {self.words}"

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(timeout=10)

    def close(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


class Procs:
    """`sluice` role processes a test starts (each with --exit-on-stdin-eof),
    closed last first."""

    def __init__(self):
        self.procs = []

    def start(self, argv):
        p = Proc([SLUICE_BIN, *argv, "--exit-on-stdin-eof"])
        self.procs.append(p)
        return p

    def close(self):
        for p in reversed(self.procs):
            p.close()


class Store:
    def __init__(self, node_args=()):
        self.master = Proc([SLUICE_BIN, "master", "--listen", "127.0.0.1:0", "--metrics-port", "0",
                            "--exit-on-stdin-eof"])
        self.endpoint = self.master.words[2]
        self.metrics = self.master.words[3]
        self.node = Proc([SLUICE_BIN, "store-node", "--master", self.endpoint, "--memory",
                          "128MiB", *node_args, "--exit-on-stdin-eof"])
        deadline = time.time() + 10
        while self.metric("sluice_store_nodes") < 1:
            assert time.time() < deadline, "the store node did not register"
            time.sleep(0.02)

    def metric(self, name):
        body = urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=5).read().decode()
        for line in body.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return -1.0

    def close(self):
        self.node.close()
        self.master.close()


@pytest.fixture(scope="module")
def store():
    s = Store()
    yield s
    s.close()


@pytest.fixture
def producer():
    started = []

    def start(*args):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        proc = Proc([sys.executable, PRODUCER, *map(str, args)], env=env)
        started.append(proc)
        return proc

    yield start
    for p in started:
        p.close()
