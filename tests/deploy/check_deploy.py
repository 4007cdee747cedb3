#!/usr/bin/python3
"""Checks deploy/ against the binary it deploys: every flag a Kubernetes
manifest, a systemd unit or a config section gives a role is one that
`sluice ROLE --help` lists; every port a role listens on is a declared
container port; probes name declared ports and paths the orchestrator
serves (asked of a running one); Services select a workload and target its
ports; no role runs an open cluster, store nodes and workers hold their
role credential rather than the token, and the gRPC faces (master,
orchestrator) serve TLS, unless --insecure says so; etcd serves TLS with
client-certificate auth, and every role speaks https to it with the CA and
a client certificate.
Usage: check_deploy.py SLUICE_BIN DEPLOY_DIR [--expect-problem REGEX]
(with it: exit 0 only when some problem matches REGEX, for tests that
break a copy of deploy/ on purpose)."""
import glob
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

ROLES = ("master", "store-node", "orchestrator", "worker")
errors = []


def fail(where, what):
    errors.append(f"{where}: {what}")


def role_flags(binary, role, cache={}):
    if role not in cache:
        out = subprocess.run([binary, role, "--help"], capture_output=True, text=True).stdout
        flags = set()
        for m in re.finditer(r"^\s+(-\w,)?(--[\w-]+(?:,!?--[\w-]+)*)", out, re.M):
            for f in m.group(2).split(","):
                flags.add(f.lstrip("!").split("{")[0])
        flags.add("--config")  # Expanded before parsing (tools/sluice_cli/config.h).
        cache[role] = flags
    return cache[role]


def check_args(binary, where, args):
    if not args or args[0] not in ROLES:
        fail(where, f"runs {args[:1]}, not one of {ROLES}")
        return None
    known = role_flags(binary, args[0])
    for a in args[1:]:
        if a.startswith("--") and a.split("=")[0] not in known:
            fail(where, f"{args[0]} has no flag {a} (sluice {args[0]} --help)")
    given = {a.split("=")[0] for a in args[1:]}
    settings = {a[2:]: flag_value(args, a) for a in given if a.startswith("--")}
    check_etcd_client(where, args[0], {k: v for k, v in settings.items()
                                       if k.startswith("etcd") or k == "insecure"})
    if "--insecure" not in given:
        if "--cluster-token" not in given and "--role-credential" not in given:
            fail(where, f"{args[0]} runs an open cluster (no --cluster-token)")
        if args[0] in ("store-node", "worker") and "--cluster-token" in given:
            fail(where, f"{args[0]} holds the cluster token: give it its role credential "
                        "(--role-credential, from sluice token derive)")
        if args[0] in ("master", "orchestrator") and "--tls-cert" not in given:
            fail(where, f"{args[0]} serves gRPC without TLS (give --tls-cert/--tls-key, "
                        "made by scripts/make-cluster-tls.sh)")
        if args[0] == "orchestrator" and "--api-keys" not in given:
            fail(where, "orchestrator serves an open HTTP API (no --api-keys)")
    return args[0]


def check_etcd_client(where, role, settings):
    """A role's etcd settings (flag name without dashes -> value): https,
    the CA, and a client certificate, unless insecure."""
    endpoints = settings.get("etcd")
    if endpoints is None or settings.get("insecure"):
        return
    if "http://" in str(endpoints):
        fail(where, f"{role}: etcd over plaintext http ({endpoints}); give https:// "
                    "with etcd-ca, etcd-cert and etcd-key")
        return
    for key in ("etcd-ca", "etcd-cert", "etcd-key"):
        if key not in settings:
            fail(where, f"{role}: etcd without {key} (etcd requires client certificates)")
    for key in ("etcd-user", "etcd-password-file"):
        if key not in settings:
            fail(where, f"{role}: etcd without {key} (each role is its own etcd user: "
                        "sluice etcd-auth)")


def check_config(binary, where, text):
    config = yaml.safe_load(text)
    for role, section in config.items():
        if role not in ROLES:
            fail(where, f"section {role} is no role")
            continue
        for key in section:
            if f"--{key}" not in role_flags(binary, role):
                fail(where, f"{role}: no flag --{key}")
        check_etcd_client(where, role, section)


def check_etcd_server(where, args):
    """etcd itself: TLS to its clients, which must present certificates."""
    urls = flag_value(args, "--listen-client-urls") or ""
    if not urls.startswith("https://") or "--client-cert-auth" not in args \
            or "--trusted-ca-file" not in args:
        fail(where, "etcd serves its clients without TLS client-certificate auth "
                    "(https --listen-client-urls, --trusted-ca-file, --client-cert-auth)")


def flag_value(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


def served_paths(binary):
    """Which of the probe paths a running orchestrator answers (not 404)."""
    proc = subprocess.Popen([binary, "orchestrator", "--http", "127.0.0.1:0"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        banner = proc.stdout.readline().split()  # READY orchestrator GRPC HTTP
        served = set()
        for path in ("/healthz", "/readyz"):
            try:
                urllib.request.urlopen(f"http://{banner[3]}{path}", timeout=5)
                served.add(path)
            except urllib.error.HTTPError as e:
                if e.code != 404:
                    served.add(path)  # 503 before workers: served all the same.
        return served
    finally:
        proc.kill()
        proc.wait()


def check_kubernetes(binary, base):
    docs = []
    for f in sorted(glob.glob(os.path.join(base, "*.yaml"))):
        docs += [(os.path.basename(f), d) for d in yaml.safe_load_all(open(f)) if d]
    kustomize = [d for f, d in docs if d["kind"] == "Kustomization"]
    listed = set(kustomize[0]["resources"]) if kustomize else set()
    for f in glob.glob(os.path.join(base, "*.yaml")):
        if os.path.basename(f) != "kustomization.yaml" and os.path.basename(f) not in listed:
            fail(f, "not listed in kustomization.yaml")
    paths = served_paths(binary)
    workloads = {}
    # etcd's auth: a Job runs `sluice etcd-auth` against the etcd shipped.
    jobs = [c for f, d in docs if d["kind"] == "Job"
            for c in d["spec"]["template"]["spec"]["containers"]]
    auth_jobs = [c for c in jobs if c["image"] == "sluice" and c["args"][:1] == ["etcd-auth"]]
    for c in auth_jobs:
        known = role_flags(binary, "etcd-auth")
        for a in c["args"][1:]:
            if str(a).startswith("--") and a not in known:
                fail("etcd.yaml", f"etcd-auth has no flag {a} (sluice etcd-auth --help)")
    if any(d["kind"] == "StatefulSet" and d["metadata"]["name"] == "sluice-etcd"
           for f, d in docs) and not auth_jobs:
        fail("etcd.yaml", "etcd's auth is never turned on (no Job runs sluice etcd-auth)")
    for f, d in docs:
        if d["kind"] == "ConfigMap":
            for name, text in d["data"].items():
                check_config(binary, f"{f} {name}", text)
        if d["kind"] not in ("Deployment", "DaemonSet", "StatefulSet"):
            continue
        spec = d["spec"]["template"]["spec"]
        labels = d["spec"]["template"]["metadata"]["labels"]
        if d["spec"]["selector"]["matchLabels"] != labels:
            fail(f, f"{d['metadata']['name']}: selector does not match its pods")
        for c in spec["containers"]:
            where = f"{f} {d['metadata']['name']}"
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            if c["image"] != "sluice":
                # Another program (etcd): its ports, for the Services.
                if c["image"] == "etcd":
                    check_etcd_server(where, [str(a) for a in c.get("args", [])])
                workloads[d["metadata"]["name"]] = (labels, ports)
                continue
            role = check_args(binary, where, [str(a) for a in c["args"]])
            for flag in ("--listen", "--http"):
                v = flag_value(c["args"], flag)
                if v is not None and v.rsplit(":", 1)[1] != "0" and \
                        int(v.rsplit(":", 1)[1]) not in ports.values():
                    fail(where, f"{flag} {v}: port not declared")
            metrics = flag_value(c["args"], "--metrics-port")
            if metrics is not None and int(metrics) not in ports.values():
                fail(where, f"--metrics-port {metrics}: port not declared")
            for kind in ("readinessProbe", "livenessProbe"):
                probe = c.get(kind)
                if not probe:
                    continue
                action = probe.get("httpGet") or probe.get("tcpSocket")
                if action["port"] not in ports and action["port"] not in ports.values():
                    fail(where, f"{kind}: no port {action['port']}")
                if "httpGet" in probe:
                    if role != "orchestrator":
                        fail(where, f"{kind}: only the orchestrator serves HTTP probes")
                    elif probe["httpGet"]["path"] not in paths:
                        fail(where, f"{kind}: the orchestrator does not serve "
                                    f"{probe['httpGet']['path']}")
                    elif ports.get(probe["httpGet"]["port"]) != \
                            int(flag_value(c["args"], "--http").rsplit(":", 1)[1]):
                        fail(where, f"{kind}: not the --http port")
            workloads[d["metadata"]["name"]] = (labels, ports)
    for f, d in docs:
        if d["kind"] != "Service":
            continue
        match = [w for w, (labels, _) in workloads.items()
                 if all(labels.get(k) == v for k, v in d["spec"]["selector"].items())]
        if not match:
            fail(f, f"Service {d['metadata']['name']} selects no workload")
            continue
        ports = workloads[match[0]][1]
        for p in d["spec"]["ports"]:
            if p["targetPort"] not in ports and p["targetPort"] not in ports.values():
                fail(f, f"Service {d['metadata']['name']}: no target port {p['targetPort']}")
    return len(docs)


def check_systemd(binary, base):
    units = sorted(glob.glob(os.path.join(base, "*.service")))
    for u in units:
        for line in open(u):
            if line.startswith("ExecStart="):
                args = shlex.split(line[len("ExecStart="):])
                if args[0] != "/usr/bin/sluice":
                    fail(u, "ExecStart does not run /usr/bin/sluice")
                check_args(binary, os.path.basename(u), args[1:])
    for c in glob.glob(os.path.join(base, "*.yaml")):
        check_config(binary, os.path.basename(c), open(c).read())
    return len(units)


def main():
    binary, deploy = sys.argv[1], sys.argv[2]
    expect = sys.argv[4] if len(sys.argv) == 5 and sys.argv[3] == "--expect-problem" else None
    docs = check_kubernetes(binary, os.path.join(deploy, "kubernetes", "base"))
    units = check_systemd(binary, os.path.join(deploy, "systemd"))
    if docs == 0 or units == 0:
        errors.append(f"nothing to check: {docs} Kubernetes objects, {units} systemd units")
    for e in errors:
        print("deploy:", e)
    print(f"deploy: {docs} Kubernetes objects, {units} systemd units checked; "
          f"{len(errors)} problem(s)")
    if expect is not None:
        found = any(re.search(expect, e) for e in errors)
        print(f"deploy: a problem matching {expect!r} {'found' if found else 'NOT found'}")
        return 0 if found else 1
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
