#!/usr/bin/env bash
# `sluice generate` and `sluice wait` against `sluice serve` over HTTPS:
# with --ca-file naming the CA of the server's certificate they are served;
# without it (the system's roots do not know that CA) and with another CA
# they are refused, naming the failure. Usage: generate_https_test.sh SLUICE_BIN
set -uo pipefail
bin=$1
dir=$(mktemp -d)
umask 077
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
for ca in ca other; do
  openssl req -x509 "${ec[@]}" -keyout "$dir/$ca.key" -out "$dir/$ca.crt" -days 2 \
    -subj "/CN=$ca" 2>/dev/null || { echo "FAIL: openssl"; exit 1; }
done
openssl req "${ec[@]}" -keyout "$dir/tls.key" -out "$dir/tls.csr" -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$dir/tls.ext"
openssl x509 -req -in "$dir/tls.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" -CAcreateserial \
  -out "$dir/tls.crt" -days 2 -extfile "$dir/tls.ext" 2>/dev/null || { echo "FAIL: openssl x509"; exit 1; }
mkfifo "$dir/in"
"$bin" serve --http 127.0.0.1:0 --http-tls-cert "$dir/tls.crt" --http-tls-key "$dir/tls.key" \
  --exit-on-stdin-eof <"$dir/in" >"$dir/serve.out" 2>"$dir/serve.err" &
server=$!
exec 3>"$dir/in"  # The server runs until this closes.
trap 'exec 3>&-; wait $server; rm -rf "$dir"' EXIT
url=""
for _ in $(seq 1 300); do  # Up to 30 s for its READY line.
  url=$(awk '$1 == "READY" && $2 == "serve" {print $3}' "$dir/serve.out")
  [ -n "$url" ] && break
  kill -0 $server 2>/dev/null || break
  sleep 0.1
done
case "$url" in
  https://127.0.0.1:*) ;;
  *) echo "FAIL: sluice serve did not start on https (READY '$url')"; cat "$dir/serve.err"; exit 1 ;;
esac
# sluice wait over https: ready with the CA, "not trusted" without it.
if ! timeout 30 "$bin" wait "$url/healthz" --ca-file "$dir/ca.crt" --timeout 10; then
  echo "FAIL: sluice wait with the CA"; exit 1
fi
out=$(timeout 30 "$bin" wait "$url/healthz" --timeout 1 2>&1)
if [ $? != 1 ] || ! grep -q "not trusted" <<<"$out"; then
  echo "FAIL: sluice wait trusted an unknown CA: $out"; exit 1
fi
gen=(generate --server "$url" --prompt "a small blue square" --size 64x64)
for bad in "" "--ca-file $dir/other.crt"; do
  # shellcheck disable=SC2086
  out=$(timeout 60 "$bin" "${gen[@]}" $bad -o "$dir/bad.png" 2>&1)
  rc=$?
  if [ "$rc" = 0 ] || [ -e "$dir/bad.png" ] || ! grep -q "submit: the server's certificate is not trusted" <<<"$out"; then
    echo "FAIL: an untrusted server was used (${bad:-system roots}): exit $rc, $out"; exit 1
  fi
done
out=$(timeout 120 "$bin" "${gen[@]}" --ca-file "$dir/ca.crt" -o "$dir/ok.png" 2>&1)
rc=$?
if [ "$rc" != 0 ] || [ "$(head -c 8 "$dir/ok.png" | od -An -tx1 | tr -d ' ')" != 89504e470d0a1a0a ]; then
  echo "FAIL: exit $rc, output: $out"; exit 1
fi
echo "generate over https: OK"
