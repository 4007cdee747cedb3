"""`--log-format json`: every role writes one JSON object per line, and a
worker's lines about a job carry the job's public id, its stage and the
worker; a bad format is refused by name."""

import json
import subprocess
import urllib.request

from conftest import SLUICE_BIN, Proc


def json_lines(path):
    lines = [line for line in open(path, encoding="utf-8").read().splitlines() if line]
    out = []
    for line in lines:
        obj = json.loads(line)  # Every line: a JSON object, or the test fails here.
        assert isinstance(obj, dict) and {"time", "level", "msg"} <= obj.keys(), line
        assert obj["time"].endswith("Z") and len(obj["time"]) == 24, line
        out.append(obj)
    return out


def test_every_role_logs_json_and_a_workers_job_lines_name_the_job(tmp_path):
    logs = {}

    def start(name, argv):
        logs[name] = tmp_path / f"{name}.log"
        return Proc([SLUICE_BIN, "--log-format", "json", "--log-level", "debug", *argv,
                     "--exit-on-stdin-eof"], stderr=open(logs[name], "w"))

    procs = []
    try:
        master = start("master", ["master", "--listen", "127.0.0.1:0"])
        procs.append(master)
        store = master.words[2]
        procs.append(start("node", ["store-node", "--master", store, "--memory", "64MiB"]))
        orch = start("orchestrator", ["orchestrator", "--store-master", store])
        procs.append(orch)
        for stage in ("encode", "denoise", "decode"):
            procs.append(start(stage, ["worker", "--stage", stage, "--orchestrator",
                                       orch.words[2], "--master", store]))
        req = urllib.request.Request(f"http://{orch.words[3]}/v1/images/generations",
                                     data=json.dumps({"prompt": "a blue \"square\""}).encode(),
                                     method="POST")
        with urllib.request.urlopen(req, timeout=60) as r:
            job = json.loads(r.read())["id"]
    finally:
        for p in reversed(procs):
            p.close()

    assert job.startswith("job-")
    for name, path in logs.items():
        lines = json_lines(path)
        assert lines, f"{name} logged nothing at debug"
    for stage in ("encode", "denoise", "decode"):
        about = [l for l in json_lines(logs[stage]) if l.get("job") == job]
        msgs = [l["msg"] for l in about]
        assert any(m.endswith(" starts") for m in msgs), (stage, msgs)
        assert any(m.endswith(" done") for m in msgs), (stage, msgs)
        for l in about:
            assert l["stage"] == stage and l["worker"].isdigit() and l["worker"] != "0", l
        # Lines about no job carry no job field.
        assert any("job" not in l for l in json_lines(logs[stage])), stage


def test_a_bad_log_format_is_refused_by_name():
    r = subprocess.run([SLUICE_BIN, "--log-format", "xml", "version"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2, r
    assert "--log-format" in r.stderr and "text or json" in r.stderr, r.stderr
