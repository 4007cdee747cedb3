"""The HTTP API through the clients users have: Python's standard library
(urllib, http.client, a multipart body built with the email package) and
Node's built-in fetch and FormData, against `sluice serve` (profile
stages)."""

import base64
import http.client
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from email import encoders, policy
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.nonmultipart import MIMENonMultipart

import pytest

from conftest import SLUICE_BIN


@pytest.fixture(scope="module")
def server():
    p = subprocess.Popen(
        [SLUICE_BIN, "serve", "--stages", "flux-1024", "--time-factor", "0.01", "--http",
         "127.0.0.1:0", "--cors-origin", "https://app.example", "--exit-on-stdin-eof"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    url = None
    for _ in range(10):
        words = p.stdout.readline().split()
        if words[:2] == ["READY", "serve"]:
            url = words[2]
            break
    assert url, "sluice serve did not start"
    yield url
    p.stdin.close()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def call(url, method, path, body=None, headers=None):
    """(status, parsed JSON or raw bytes, headers) of one request via urllib."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers or {})
    if isinstance(body, dict):
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            raw, status, hdrs = r.read(), r.status, r.headers
    except urllib.error.HTTPError as e:
        raw, status, hdrs = e.read(), e.code, e.headers
    if hdrs.get_content_type() == "application/json":
        return status, json.loads(raw), hdrs
    return status, raw, hdrs


def assert_error_shape(body, param=None):
    assert set(body["error"]) >= {"message", "type", "param", "code"}, body
    if param is not None:
        assert body["error"]["param"] == param, body


def form_data(fields, files=()):
    """A multipart/form-data body built by the email package: (content type, bytes)."""
    msg = MIMEMultipart("form-data")
    for name, value in fields.items():
        part = MIMENonMultipart("text", "plain")
        part.set_payload(value)
        part.add_header("Content-Disposition", "form-data", name=name)
        msg.attach(part)
    for name, filename, data in files:
        part = MIMEApplication(data, "octet-stream", _encoder=encoders.encode_noop)
        part.add_header("Content-Disposition", "form-data", name=name, filename=filename)
        msg.attach(part)
    raw = msg.as_bytes(policy=policy.HTTP)
    return msg["Content-Type"], raw[raw.index(b"\r\n\r\n") + 4:]


def wait_video(url, vid, want="completed"):
    deadline = time.time() + 30
    while time.time() < deadline:
        status, v, _ = call(url, "GET", f"/v1/videos/{vid}")
        assert status == 200, v
        if v["status"] == want:
            return v
        time.sleep(0.05)
    raise AssertionError(f"{vid} not {want}: {v}")


def test_images_take_openais_fields(server):
    status, body, _ = call(server, "POST", "/v1/images/generations", {
        "model": "flux-1024", "prompt": "a lighthouse", "n": 1, "size": "1024x1024",
        "quality": "hd", "style": "vivid", "response_format": "b64_json",
        "output_format": "png", "background": "auto", "user": "user-1"})
    assert status == 200, body
    assert base64.b64decode(body["data"][0]["b64_json"])
    status, body, _ = call(server, "POST", "/v1/images/generations",
                           {"prompt": "x", "output_format": "webp"})
    assert status == 400
    assert_error_shape(body, "output_format")
    assert "webp" in body["error"]["message"]
    status, body, _ = call(server, "POST", "/v1/images/generations",
                           {"prompt": "x", "quality": "ultra"})
    assert status == 400
    assert_error_shape(body, "quality")


def test_videos_from_a_multipart_form_list_fetch_and_delete(server):
    host, port = server[len("http://"):].split(":")
    ctype, body = form_data({"model": "flux-1024", "prompt": "waves at dusk", "seconds": "4",
                             "size": "720x1280"})
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("POST", "/v1/videos", body, {"Content-Type": ctype})
    r = conn.getresponse()
    video = json.loads(r.read())
    assert r.status == 200, video
    for field in ("id", "object", "model", "status", "progress", "created_at", "completed_at",
                  "expires_at", "seconds", "size", "error"):
        assert field in video, (field, video)
    assert video["object"] == "video" and video["seconds"] == "4"
    assert video["size"] == "720x1280" and video["model"] == "flux-1024"
    done = wait_video(server, video["id"])
    assert done["progress"] == 100 and done["completed_at"] >= done["created_at"]
    status, content, _ = call(server, "GET", f"/v1/videos/{video['id']}/content")
    assert status == 200 and len(content) > 0

    status, page, _ = call(server, "GET", "/v1/videos?limit=1&order=desc")
    assert status == 200 and page["object"] == "list", page
    assert [v["id"] for v in page["data"]] == [video["id"]]
    status, page, _ = call(server, "GET", f"/v1/videos?after={video['id']}&order=asc")
    assert status == 200 and page["data"] == [] and page["has_more"] is False
    status, bad, _ = call(server, "GET", "/v1/videos?limit=0")
    assert status == 400
    assert_error_shape(bad, "limit")

    status, gone, _ = call(server, "DELETE", f"/v1/videos/{video['id']}")
    assert status == 200 and gone == {"id": video["id"], "object": "video.deleted",
                                      "deleted": True}
    status, missing, _ = call(server, "GET", f"/v1/videos/{video['id']}")
    assert status == 404
    assert_error_shape(missing)

    # A reference picture that is no PNG: 400 naming it.
    ctype, body = form_data({"prompt": "from a picture"},
                            [("input_reference", "ref.png", b"not really a png")])
    conn.request("POST", "/v1/videos", body, {"Content-Type": ctype})
    r = conn.getresponse()
    refused = json.loads(r.read())
    assert r.status == 400
    assert_error_shape(refused, "input_reference")


def test_unknown_routes_and_methods_answer_errors(server):
    status, body, _ = call(server, "GET", "/v1/nowhere")
    assert status == 404
    assert_error_shape(body)
    status, body, hdrs = call(server, "PATCH", "/v1/videos")
    assert status == 405 and "GET" in hdrs["Allow"]
    assert_error_shape(body)


def test_cors_preflight_for_an_allowed_origin(server):
    status, _, hdrs = call(server, "OPTIONS", "/v1/images/generations", headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert status == 204
    assert hdrs["Access-Control-Allow-Origin"] == "https://app.example"
    assert "POST" in hdrs["Access-Control-Allow-Methods"]
    status, _, hdrs = call(server, "GET", "/healthz", headers={"Origin": "https://other.example"})
    assert status == 200 and "Access-Control-Allow-Origin" not in hdrs


NODE_CLIENT = r"""
const base = process.argv[2];
const out = {};
const form = new FormData();
form.append("model", "flux-1024");
form.append("prompt", "a paper boat");
form.append("seconds", "2");
form.append("size", "1280x720");
let r = await fetch(base + "/v1/videos", { method: "POST", body: form });
out.video = { status: r.status, body: await r.json() };
r = await fetch(base + "/v1/images/generations", {
  method: "POST",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ prompt: "a paper crane", response_format: "url" }),
});
out.image = { status: r.status, body: await r.json() };
if (r.status === 200) {
  const png = await fetch(out.image.body.data[0].url);
  out.image_url = { status: png.status, bytes: (await png.arrayBuffer()).byteLength };
}
const bad = new FormData();
bad.append("prompt", "with a picture");
bad.append("input_reference", new Blob([new Uint8Array([1, 2, 3])]), "ref.png");
r = await fetch(base + "/v1/videos", { method: "POST", body: bad });
out.refused = { status: r.status, body: await r.json() };
console.log(JSON.stringify(out));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_fetch_and_formdata(server, tmp_path):
    script = tmp_path / "client.mjs"
    script.write_text(NODE_CLIENT)
    run = subprocess.run(["node", str(script), server], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["video"]["status"] == 200, out
    assert out["video"]["body"]["seconds"] == "2" and out["video"]["body"]["size"] == "1280x720"
    wait_video(server, out["video"]["body"]["id"])
    assert out["image"]["status"] == 200, out
    assert out["image_url"]["status"] == 200 and out["image_url"]["bytes"] > 0
    assert out["refused"]["status"] == 400
    assert out["refused"]["body"]["error"]["param"] == "input_reference"
