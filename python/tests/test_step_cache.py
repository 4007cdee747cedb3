"""Step caching across processes: a denoise worker started with
`--step-cache-threshold` caches the steps of a job that names no step_cache,
a request's own step_cache overrides it (0: off), the job's denoise
stage_done event counts the steps and the skipped ones, and bad input is
refused by name: the request's field with a 400, the worker's flag at start."""

import base64
import json
import subprocess
import urllib.request

from conftest import SLUICE_BIN, Procs, post_image

REQUEST = {"prompt": "a large red circle on the left on a blue background",
           "size": "128x128", "seed": 5, "steps": 12}


def post(http, body):
    return post_image(http, body, timeout=120)


def denoise_counts(http, job):
    with urllib.request.urlopen(f"http://{http}/v1/jobs/{job}/events", timeout=60) as r:
        events = r.read().decode()
    done = [json.loads(line[6:]) for line in events.splitlines()
            if line.startswith("data: ") and '"stage_done"' in line]
    return [e.get("counts", {}) for e in done if e["stage"] == "denoise"][0]


def test_a_workers_default_a_requests_own_and_bad_input():
    procs = Procs()
    start = procs.start
    try:
        store = start(["master", "--listen", "127.0.0.1:0"]).words[2]
        start(["store-node", "--master", store, "--memory", "64MiB"])
        orch = start(["orchestrator", "--store-master", store])
        for stage in ("encode", "denoise", "decode"):
            extra = ["--step-cache-threshold", "0.3"] if stage == "denoise" else []
            start(["worker", "--stage", stage, "--orchestrator", orch.words[2], "--master", store,
                   *extra])
        http = orch.words[3]
        images, counts = {}, {}
        for name, extra in (("default", {}), ("asked", {"step_cache": {"threshold": 0.3}}),
                            ("off", {"step_cache": {"threshold": 0}})):
            status, body = post(http, {**REQUEST, **extra})
            assert status == 200, body
            images[name] = base64.b64decode(body["data"][0]["b64_json"])
            counts[name] = denoise_counts(http, body["id"])
        status, body = post(http, {**REQUEST, "step_cache": {"threshold": 1.5}})
        assert status == 400 and body["error"]["param"] == "step_cache", body
        assert "0..1" in body["error"]["message"], body
    finally:
        procs.close()

    # The worker's default is the request's 0.3: the same bytes, the same count.
    assert images["default"] == images["asked"]
    assert images["off"] != images["asked"]
    assert all(i.startswith(b"\x89PNG") for i in images.values())
    assert counts["off"] == {"steps": 12}, counts
    skipped = counts["asked"]["steps_skipped"]
    assert 0 < skipped < 12, counts
    assert counts["default"] == counts["asked"] == {"steps": 12, "steps_skipped": skipped}, counts


def test_a_bad_step_cache_threshold_flag_is_refused_by_name():
    r = subprocess.run([SLUICE_BIN, "worker", "--stage", "denoise", "--orchestrator",
                        "127.0.0.1:1", "--step-cache-threshold", "1.5"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0, r
    assert "--step-cache-threshold" in r.stderr, r.stderr
