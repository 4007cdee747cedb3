"""Python stage workers serving the orchestrator (a `sluice orchestrator` process)."""

import base64
import json
import time
import urllib.error
import urllib.request

import pytest

import sluice
from sluice import StageOutput, StageWorker
from sluice.worker import ADAPTER_LABEL_PREFIX

from conftest import SLUICE_BIN, Proc, post_image


@pytest.fixture
def orchestrator():
    # The handlers here return short byte strings, not PNGs of the asked size.
    p = Proc([SLUICE_BIN, "orchestrator", "--no-output-check", "--exit-on-stdin-eof"])
    yield p.words[2], p.words[3]
    p.close()


post = post_image


def test_python_handlers_run_every_stage(orchestrator):
    grpc, http = orchestrator
    steps_seen = []

    def encode(ctx):
        return json.loads(ctx.request_json)["prompt"].encode()

    def denoise(ctx):
        for s in range(3):
            assert not ctx.should_stop()
            ctx.progress(s + 1, 3)
            steps_seen.append(s)
        return StageOutput(output=b"latent(" + ctx.input + b")")

    def decode(ctx):
        ctx.first_output()
        return StageOutput(output=b"png(" + ctx.input + b")", content_type="image/png")

    workers = [StageWorker("encode", grpc, encode), StageWorker("denoise", grpc, denoise),
               StageWorker("decode", grpc, decode)]
    try:
        status, body = post(http, {"prompt": "a heron"})
        assert status == 200, body
        assert base64.b64decode(body["data"][0]["b64_json"]) == b"png(latent(a heron))"
        assert steps_seen == [0, 1, 2]
        assert workers[1].completed == 1
    finally:
        for w in workers:
            w.close()


def test_a_handlers_timings_and_counts_show_on_its_stage_done_event(orchestrator):
    grpc, http = orchestrator
    refused, held_refused = [], []

    def denoise(ctx):
        ctx.add_timing("input", 0.002)
        ctx.add_timing("input", 0.001)  # Added up.
        for phase, seconds in (("Input", 1), ("run", 1), ("output", -1), ("output", float("nan"))):
            try:
                ctx.add_timing(phase, seconds)
            except sluice.InvalidArgumentError as e:
                refused.append(str(e))
        ctx.add_count("steps", 12)
        ctx.add_count("steps_skipped", 4)
        ctx.add_count("steps_skipped", 1)  # Added up.
        for name, n in (("Steps", 1), ("steps", -1)):
            try:
                ctx.add_count(name, n)
            except sluice.InvalidArgumentError as e:
                refused.append(str(e))
        ctx.set_held([ADAPTER_LABEL_PREFIX + "0123456789abcdef"] * 16)
        for labels in ([""], ["x" * 129], ["x"] * 17, ["ok", ""]):
            try:
                ctx.set_held(labels)
            except sluice.InvalidArgumentError as e:
                held_refused.append(str(e))
        return StageOutput(output=b"latent")

    workers = [StageWorker("encode", grpc, lambda ctx: b"cond"),
               StageWorker("denoise", grpc, denoise),
               StageWorker("decode", grpc, lambda ctx: StageOutput(output=b"png"))]
    try:
        status, body = post(http, {"prompt": "a heron", "async": True})
        assert status == 202, body
        # The event stream ends once the job finished.
        with urllib.request.urlopen(f"http://{http}/v1/jobs/{body['id']}/events",
                                    timeout=30) as r:
            events = r.read().decode()
        done = [json.loads(line[6:]) for line in events.splitlines()
                if line.startswith("data: ") and '"stage_done"' in line]
        timings = {e["stage"]: e.get("timings_ms", {}) for e in done}
        assert timings["denoise"]["input"] == pytest.approx(3.0), timings
        assert set(timings["denoise"]) == {"input", "start", "run"}, timings
        assert timings["denoise"]["run"] > 0 and timings["encode"]["run"] > 0, timings
        counts = {e["stage"]: e.get("counts", {}) for e in done}
        assert counts == {"encode": {}, "denoise": {"steps": 12, "steps_skipped": 5},
                          "decode": {}}, counts
        assert len(refused) == 6, refused
        assert "phase 'Input'" in refused[0] and "finite" in refused[3], refused
        assert "name 'Steps'" in refused[4] and ">= 0" in refused[5], refused
        assert len(held_refused) == 4, held_refused
        assert "held label 0: 1..128 bytes, not 0" in held_refused[0], held_refused
        assert "not 129" in held_refused[1] and "17 of them, at most 16" in held_refused[2], \
            held_refused
        assert "held label 1" in held_refused[3], held_refused
    finally:
        for w in workers:
            w.close()


def test_a_handler_sees_whether_its_job_is_interactive(orchestrator):
    grpc, http = orchestrator
    seen = []

    def denoise(ctx):
        seen.append((json.loads(ctx.request_json)["prompt"], ctx.interactive))
        return StageOutput(output=b"latent")

    workers = [StageWorker("encode", grpc, lambda ctx: b"cond"),
               StageWorker("denoise", grpc, denoise),
               StageWorker("decode", grpc, lambda ctx: StageOutput(output=b"png"))]
    try:
        for priority in ("interactive", "standard", "batch"):
            status, body = post(http, {"prompt": priority, "priority": priority})
            assert status == 200, body
        assert seen == [("interactive", True), ("standard", False), ("batch", False)], seen
    finally:
        for w in workers:
            w.close()


def test_a_checkpointed_step_is_acknowledged_by_a_later_heartbeat(orchestrator):
    grpc, http = orchestrator
    seen = []

    def denoise(ctx):
        seen.append(ctx.reported_checkpoint)  # Nothing reported yet.
        ctx.progress(2, 3, checkpointed=True)
        deadline = time.monotonic() + 10
        while ctx.reported_checkpoint < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.append(ctx.reported_checkpoint)
        ctx.progress(3, 3)
        return StageOutput(output=b"latent")

    workers = [StageWorker("encode", grpc, lambda ctx: b"cond"),
               StageWorker("denoise", grpc, denoise),
               StageWorker("decode", grpc, lambda ctx: StageOutput(output=b"png"))]
    try:
        status, body = post(http, {"prompt": "a heron"})
        assert status == 200, body
        assert seen == [0, 2]
    finally:
        for w in workers:
            w.close()


def test_a_raising_handler_fails_the_job_with_its_message(orchestrator):
    grpc, http = orchestrator

    def broken(ctx):
        raise sluice.InvalidArgumentError("prompt too spicy")

    workers = [StageWorker("encode", grpc, broken), StageWorker("denoise", grpc, lambda c: b"x"),
               StageWorker("decode", grpc, lambda c: b"y")]
    try:
        status, body = post(http, {"prompt": "x"})
        assert status == 400, body  # A handler rejecting its input: the client's error.
        assert "prompt too spicy" in body["error"]["message"]
    finally:
        for w in workers:
            w.close()


def test_bad_worker_arguments_are_typed_errors():
    with pytest.raises(sluice.InvalidArgumentError, match="stage"):
        StageWorker("paint", "127.0.0.1:1", lambda c: b"")
    with pytest.raises(sluice.InvalidArgumentError, match="callable"):
        StageWorker("encode", "127.0.0.1:1", None)
    with pytest.raises(sluice.InvalidArgumentError):
        StageWorker("encode", "no-port", lambda c: b"")
    with pytest.raises(sluice.InvalidArgumentError, match="takes_picture"):
        StageWorker("encode", "127.0.0.1:1", lambda c: b"", takes_picture="yes")


def get(http, path):
    try:
        with urllib.request.urlopen(f"http://{http}{path}", timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_workers_declare_a_model_with_a_stage_of_its_own(orchestrator):
    """A model whose pipeline ends in an upscale stage, served beside the
    default model: each job runs its own model's stages on its workers."""
    grpc, http = orchestrator
    sr = "encode,denoise:admission,decode,upscale"
    seen = []

    def stage(name):
        def run(ctx):
            seen.append((ctx.model, ctx.stage))
            if name == "encode":
                return json.loads(ctx.request_json)["prompt"].encode()
            out = name.encode() + b"(" + ctx.input + b")"
            last = name == "upscale" or (name == "decode" and ctx.model != "py-sr")
            return StageOutput(output=out, content_type="image/png" if last else "")
        return run

    workers = [StageWorker(s.split(":")[0], grpc, stage(s.split(":")[0]), model="py-sr",
                           pipeline=sr) for s in sr.split(",")]
    workers += [StageWorker(s, grpc, stage(s)) for s in ("encode", "denoise", "decode")]
    # Workers register in the background: py-sr exists once its workers do.
    assert all(w.wait_registered(10) for w in workers)
    try:
        status, body = post(http, {"prompt": "a kite", "model": "py-sr"})
        assert status == 200, body
        assert base64.b64decode(body["data"][0]["b64_json"]) == \
            b"upscale(decode(denoise(a kite)))"
        assert [s for m, s in seen if m == "py-sr"] == ["encode", "denoise", "decode", "upscale"]
        status, body = post(http, {"prompt": "a gull"})
        assert status == 200, body
        assert base64.b64decode(body["data"][0]["b64_json"]) == b"decode(denoise(a gull))"
        assert [s for m, s in seen if m == "sluice-reference"] == ["encode", "denoise", "decode"]
        status, listed = get(http, "/v1/models/py-sr")
        assert status == 200, listed
        assert [(s["name"], s["kind"], s["workers"]) for s in listed["stages"]] == [
            ("encode", "work", 1), ("denoise", "admission", 1), ("decode", "work", 1),
            ("upscale", "work", 1)]
        status, body = post(http, {"prompt": "x", "model": "nobody-serves-this"})
        assert status == 404 and body["error"]["code"] == "model_not_found", body
    finally:
        for w in workers:
            w.close()


def test_a_workers_declared_size_is_what_its_models_requests_get(orchestrator):
    """Workers declare the size their model was trained at; a request for
    that model without a `size` gets it, one with a size keeps its own."""
    grpc, http = orchestrator

    def stage(name):
        def run(ctx):
            if name != "decode":
                return b"-"
            return StageOutput(output=json.loads(ctx.request_json)["size"].encode(),
                               content_type="text/plain")
        return run

    workers = [StageWorker(s, grpc, stage(s), model="py-small", image_size="96x64",
                           video_size="160x96") for s in ("encode", "denoise", "decode")]
    assert all(w.wait_registered(10) for w in workers)
    try:
        def size_of(body):
            status, out = post(http, dict(body, model="py-small"))
            assert status == 200, out
            return base64.b64decode(out["data"][0]["b64_json"]).decode()
        assert size_of({"prompt": "a kite"}) == "96x64"
        assert size_of({"prompt": "a kite", "size": "128x128"}) == "128x128"
        with pytest.raises(sluice.InvalidArgumentError, match="image_size"):
            StageWorker("encode", grpc, stage("encode"), model="py-small", image_size="96x60")
        with pytest.raises(sluice.InvalidArgumentError, match="video_size must be a string"):
            StageWorker("encode", grpc, stage("encode"), model="py-small", video_size=96)
    finally:
        for w in workers:
            w.close()


def test_bad_models_and_pipelines_are_refused_by_name(orchestrator):
    grpc, _ = orchestrator
    handler = lambda ctx: b""  # noqa: E731
    bad = [
        (dict(stage="upscale"), "not in the pipeline"),  # The standard one has no upscale.
        (dict(stage="encode", pipeline="encode,,decode"), "stage name ''"),
        (dict(stage="encode", pipeline="encode:pinned"), "work or admission"),
        (dict(stage="encode", model="a b"), "model name 'a b'"),
        (dict(stage="encode", model=["ok", 3]), "model must be a string"),
    ]
    for kwargs, why in bad:
        stage = kwargs.pop("stage")
        with pytest.raises(sluice.InvalidArgumentError, match=why):
            StageWorker(stage, grpc, handler, **kwargs)


def test_handler_failures_keep_their_code_and_no_traceback_reaches_the_client(orchestrator):
    """A handler rejecting its input is the client's 400; out of memory is
    retried on another worker; anything else is a 500 naming the exception,
    never a traceback with server paths."""
    grpc, http = orchestrator
    oom_on = []  # The workers that ran out of memory.

    class OutOfMemoryError(RuntimeError):  # What torch.cuda raises.
        pass

    def denoise_on(name):
        def run(ctx):
            prompt = json.loads(ctx.request_json)["prompt"]
            if prompt == "too long":
                raise sluice.InvalidArgumentError("prompt: longer than the encoder's 77 tokens")
            if prompt == "boom":
                raise RuntimeError("boom")
            if prompt == "oom" and not oom_on:
                oom_on.append(name)
                raise OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return StageOutput(output=name.encode())
        return run

    workers = [StageWorker("encode", grpc, lambda ctx: b"c"),
               StageWorker("denoise", grpc, denoise_on("d1")),
               StageWorker("denoise", grpc, denoise_on("d2")),
               StageWorker("decode", grpc,
                           lambda ctx: StageOutput(output=ctx.input, content_type="image/png"))]
    # Both denoise workers registered: the retry has another one to go to.
    assert all(w.wait_registered(10) for w in workers)
    try:
        status, body = post(http, {"prompt": "too long"})
        assert status == 400, body
        assert body["error"]["type"] == "invalid_request_error"
        assert "longer than the encoder's 77 tokens" in body["error"]["message"]
        status, body = post(http, {"prompt": "boom"})
        assert status == 500, body
        assert "RuntimeError: boom" in body["error"]["message"]
        for leak in ("Traceback", ".py", "line "):
            assert leak not in body["error"]["message"], body
        status, body = post(http, {"prompt": "oom"})
        assert status == 200, body
        ran_on = base64.b64decode(body["data"][0]["b64_json"]).decode()
        assert oom_on and ran_on != oom_on[0], (oom_on, ran_on)
    finally:
        for w in workers:
            w.close()


def test_a_worker_prints_ready_only_once_registered():
    """Pointed at an orchestrator that is not there yet, a worker retries
    (logging each failure) and prints READY only when it is accepted."""
    import socket
    import subprocess
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    worker = subprocess.Popen(
        [SLUICE_BIN, "worker", "--stage", "encode", "--orchestrator", f"127.0.0.1:{port}",
         "--profile", "flux-1024", "--mode", "p2p", "--exit-on-stdin-eof"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    orch = None
    try:
        import select
        early, _, _ = select.select([worker.stdout], [], [], 1.5)
        assert not early, "READY before any orchestrator: " + worker.stdout.readline()
        assert worker.poll() is None
        orch = Proc([SLUICE_BIN, "orchestrator", "--listen", f"127.0.0.1:{port}",
                     "--exit-on-stdin-eof"])
        line = worker.stdout.readline()  # Blocks until READY (the test's timeout bounds it).
        assert line.startswith("READY worker encode"), line
    finally:
        worker.stdin.close()
        worker.wait(timeout=30)
        if orch is not None:
            orch.close()
    err = worker.stderr.read()
    assert f"orchestrator 127.0.0.1:{port} unreachable" in err, err


def wait_finished(http, job_id, within=30):
    """The job once it is no longer queued or running (or as it is after `within` s)."""
    deadline = time.monotonic() + within
    while True:
        _, job = get(http, f"/v1/jobs/{job_id}")
        if job["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def test_keep_alive_renews_a_long_assignments_lease():
    """A decode longer than the assignment timeout keeps its lease by
    calling ctx.keep_alive(): it runs once, with no lease_expired event."""
    orch = Proc([SLUICE_BIN, "orchestrator", "--assignment-timeout-ms", "700",
                 "--no-output-check", "--exit-on-stdin-eof"])
    grpc, http = orch.words[2], orch.words[3]
    runs = []

    def slow_decode(ctx):
        runs.append(ctx.job_id)
        for _ in range(15):  # 1.5 s, twice the lease.
            time.sleep(0.1)
            ctx.keep_alive()
        return StageOutput(output=b"frame", content_type="image/png")

    workers = [StageWorker("encode", grpc, lambda ctx: b"c"),
               StageWorker("denoise", grpc, lambda ctx: b"l"),
               StageWorker("decode", grpc, slow_decode, heartbeat=0.1)]
    try:
        status, body = post(http, {"prompt": "slow", "async": True})
        assert status == 202, body
        job = wait_finished(http, body["id"])
        assert job["status"] == "succeeded", job
        assert len(runs) == 1, runs
        with urllib.request.urlopen(f"http://{http}/v1/jobs/{body['id']}/events",
                                    timeout=30) as r:
            assert b"lease_expired" not in r.read()
    finally:
        for w in workers:
            w.close()
        orch.close()


def test_a_workers_own_assignment_timeout_replaces_the_orchestrators():
    """A decode worker declaring a 0.7 s lease loses a 1.5 s silent run under
    an orchestrator whose default lease is 10 minutes."""
    orch = Proc([SLUICE_BIN, "orchestrator", "--no-output-check", "--exit-on-stdin-eof"])
    grpc, http = orch.words[2], orch.words[3]
    runs = []

    def decode(ctx):
        runs.append(ctx.job_id)
        if len(runs) == 1:
            time.sleep(1.5)  # No progress, no keep-alive.
        return StageOutput(output=b"frame", content_type="image/png")

    workers = [StageWorker("encode", grpc, lambda ctx: b"c"),
               StageWorker("denoise", grpc, lambda ctx: b"l"),
               StageWorker("decode", grpc, decode, heartbeat=0.1, assignment_timeout=0.7)]
    try:
        with pytest.raises(sluice.InvalidArgumentError, match="more than two heartbeats"):
            StageWorker("decode", grpc, decode, heartbeat=0.5, assignment_timeout=0.7)
        for w in workers:
            assert w.wait_registered(10)
        status, body = post(http, {"prompt": "lapse", "async": True})
        assert status == 202, body
        job = wait_finished(http, body["id"])
        assert job["status"] == "succeeded", job
        assert len(runs) == 2, runs
        with urllib.request.urlopen(f"http://{http}/v1/jobs/{body['id']}/events",
                                    timeout=30) as r:
            assert b"lease_expired" in r.read()
    finally:
        for w in workers:
            w.close()
        orch.close()
