#!/bin/bash
# Runs a command beside a private etcd (Debian's etcd-server) on free
# loopback ports, its data in a temporary directory: every argument
# "@ETCD@" becomes its client URL. Exits 77 (skipped) without /usr/bin/etcd.
set -u
if [ ! -x /usr/bin/etcd ]; then
  echo "no /usr/bin/etcd (Debian's etcd-server): skipped"
  exit 77
fi
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
dir=$(mktemp -d /tmp/sluice-etcd-XXXXXX)
client=$(free_port)
peer=$(free_port)
url="http://127.0.0.1:${client}"
/usr/bin/etcd --name bench --data-dir "$dir" \
  --listen-client-urls "$url" --advertise-client-urls "$url" \
  --listen-peer-urls "http://127.0.0.1:${peer}" \
  --initial-advertise-peer-urls "http://127.0.0.1:${peer}" \
  --initial-cluster "bench=http://127.0.0.1:${peer}" >"$dir.log" 2>&1 &
etcd_pid=$!
cleanup() {
  kill -9 "$etcd_pid" 2>/dev/null
  wait "$etcd_pid" 2>/dev/null
  rm -rf "$dir" "$dir.log"
}
trap cleanup EXIT
for _ in $(seq 1 100); do
  if /usr/bin/python3 -c "import urllib.request,sys; urllib.request.urlopen('$url/health', timeout=1)" 2>/dev/null; then
    break
  fi
  sleep 0.1
done
args=()
for a in "$@"; do
  args+=("${a//@ETCD@/$url}")
done
"${args[@]}"
