"""The Grafana dashboard against a real Prometheus (Debian's `prometheus`).

A cluster whose every role serves /metrics (master, store node,
orchestrator, three workers) runs jobs while Prometheus scrapes it each
second; then every query of deploy/grafana/sluice.json is evaluated, and
any that returns nothing fails the test, named.
"""

import json
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python" / "tests"))
from conftest import SLUICE_BIN, Proc  # noqa: E402

DASHBOARD = ROOT / "deploy" / "grafana" / "sluice.json"
PROMETHEUS = shutil.which("prometheus")


def get_json(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def dashboard_queries():
    dash = json.loads(DASHBOARD.read_text())
    out = []
    for panel in dash["panels"]:
        for target in panel["targets"]:
            out.append((panel["title"], target["expr"]))
    return out


def test_the_dashboard_is_well_formed():
    queries = dashboard_queries()
    assert len(queries) >= 15
    titles = [t for t, _ in queries]
    assert len(set(titles)) == len(titles), "two panels share a title"
    roles = {"sluice_orchestrator_", "sluice_worker_", "sluice_store_node_", "sluice_store_",
             "sluice_engine_"}
    assert all(any(r in q for _, q in queries) for r in roles), "a role has no panel"


@pytest.fixture(scope="module")
def cluster():
    procs = []

    def start(*argv):
        p = Proc([SLUICE_BIN, *argv, "--exit-on-stdin-eof"])
        procs.append(p)
        return p

    try:
        master = start("master", "--listen", "127.0.0.1:0", "--metrics-port", "0")
        node = start("store-node", "--master", master.words[2], "--memory", "128MiB",
                     "--metrics-port", "0")
        orch = start("orchestrator", "--store-master", master.words[2])
        workers = [start("worker", "--stage", stage, "--orchestrator", orch.words[2],
                         "--master", master.words[2], "--metrics-port", "0")
                   for stage in ("encode", "denoise", "decode")]
        yield {
            "http": orch.words[3],
            "targets": {
                "master": [master.words[3]],
                "store-node": [node.words[4]],
                "orchestrator": [orch.words[3]],
                "worker": [w.words[4] for w in workers],
            },
        }
    finally:
        for p in reversed(procs):
            p.close()


@pytest.fixture(scope="module")
def prometheus(cluster):
    assert PROMETHEUS, "prometheus is not installed (scripts/install-deps.sh installs it)"
    with tempfile.TemporaryDirectory() as tmp:
        config = pathlib.Path(tmp) / "prometheus.yml"
        jobs = [{"job_name": job, "static_configs": [{"targets": targets}]}
                for job, targets in cluster["targets"].items()]
        config.write_text(json.dumps({
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "scrape_configs": jobs,
        }))
        address = f"127.0.0.1:{free_port()}"
        p = subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                              f"--storage.tsdb.path={tmp}/data", f"--web.listen-address={address}",
                              "--log.level=warn", "--enable-feature=exemplar-storage"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.time() + 30
            while True:
                assert p.poll() is None, f"prometheus exited: {p.stderr.read()}"
                try:
                    urllib.request.urlopen(f"http://{address}/-/ready", timeout=1)
                    break
                except OSError:
                    assert time.time() < deadline, "prometheus never became ready"
                    time.sleep(0.1)
            yield address
        finally:
            p.terminate()
            p.wait(timeout=30)


def query(address, expr):
    url = f"http://{address}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = get_json(url)
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def test_every_role_is_scraped_and_every_dashboard_query_answers(cluster, prometheus):
    # Jobs while Prometheus scrapes: two prompts, each asked twice (the
    # second time from the condition cache), spread over several scrapes.
    prompts = ["a large red circle on the left", "a small blue square at the top"] * 3
    started = time.time()
    jobs = set()
    for prompt in prompts:
        req = urllib.request.Request(f"http://{cluster['http']}/v1/images/generations",
                                     data=json.dumps({"prompt": prompt}).encode(), method="POST")
        with urllib.request.urlopen(req, timeout=60) as r:
            assert r.status == 200
            jobs.add(json.loads(r.read())["id"])
        time.sleep(0.5)

    # Every target up, and scraped after the last job.
    finished = time.time()
    deadline = finished + 30
    while True:
        targets = get_json(f"http://{prometheus}/api/v1/targets")["data"]["activeTargets"]
        up = [t for t in targets if t["health"] == "up"]
        scraped = [t for t in up if _scraped_after(t["lastScrape"], finished + 1)]
        if len(scraped) == 6:
            break
        assert time.time() < deadline, [(t["labels"]["job"], t["health"], t["lastError"])
                                        for t in targets]
        time.sleep(0.2)
    assert {t["labels"]["job"] for t in up} == set(cluster["targets"])

    # A rate needs two samples in its window: a loaded host may take a few
    # more scrapes to have them. Asked again until every query answers.
    deadline = time.time() + 30
    while True:
        empty = [(title, expr) for title, expr in dashboard_queries()
                 if not query(prometheus, expr)]
        if not empty or time.time() > deadline:
            break
        time.sleep(0.5)
    assert not empty, "dashboard queries that return nothing:\n" + "\n".join(
        f"  {title}: {expr}" for title, expr in empty)

    # And what they say is the run's: six jobs; encode ran once per prompt
    # (the other four skipped it, their conditions cached).
    done = {r["metric"]["stage"]: float(r["value"][1])
            for r in query(prometheus, "sum by (stage) (sluice_worker_done_total)")}
    assert done == {"encode": 2.0, "denoise": 6.0, "decode": 6.0}, done
    succeeded = query(prometheus, "sum(sluice_orchestrator_jobs_succeeded_total)")
    assert float(succeeded[0]["value"][1]) == 6

    # Workers' run-time buckets carry exemplars (Prometheus scrapes them as
    # OpenMetrics): each names one of these jobs, in the bucket its value
    # fell in.
    def exemplars(metric):
        url = f"http://{prometheus}/api/v1/query_exemplars?" + urllib.parse.urlencode(
            {"query": metric, "start": started - 60, "end": time.time() + 60})
        series = get_json(url)["data"]
        for s in series:
            upper = float(s["seriesLabels"]["le"])
            for e in s["exemplars"]:
                assert e["labels"]["job_id"] in jobs, (e, jobs)
                assert 0 < float(e["value"]) <= upper, (s["seriesLabels"], e)
        return [s for s in series if s["exemplars"]]

    stages = {s["seriesLabels"]["stage"] for s in exemplars("sluice_worker_run_seconds_bucket")}
    assert stages == {"encode", "denoise", "decode"}, stages
    # The orchestrator's job latency and TTFF buckets likewise.
    for metric in ("sluice_orchestrator_job_seconds_bucket", "sluice_orchestrator_ttff_seconds_bucket"):
        assert exemplars(metric), metric


def _scraped_after(stamp, t):
    # RFC 3339 with nanoseconds and a zone, e.g. 2026-12-06T16:30:01.123456789Z.
    from datetime import datetime
    head, _, frac = stamp.partition(".")
    zone = frac.lstrip("0123456789")
    digits = frac[:len(frac) - len(zone)][:6]
    parsed = datetime.fromisoformat(f"{head}.{digits or '0'}{'+00:00' if zone == 'Z' else zone}")
    return parsed.timestamp() > t
