#!/usr/bin/env bash
# Makes a cluster's TLS files in DIR: a CA (ca.crt, ca.key) and one
# certificate for the name "sluice" (tls.crt, tls.key) that every role
# serves and presents, for mutual TLS on gRPC. Roles dial with
# --tls-server-name sluice, so the certificate holds at any address. It also
# names etcd's Service (sluice-etcd) and members (*.sluice-etcd-peers),
# which serve it to the roles, whose etcd client checks the name it dials.
# Keep ca.key off the cluster. Usage: scripts/make-cluster-tls.sh DIR [DAYS]
set -euo pipefail
dir=${1:?usage: scripts/make-cluster-tls.sh DIR [DAYS]}
days=${2:-365}
mkdir -p "$dir"
cd "$dir"
umask 077
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -days "$days" \
  -subj /CN=sluice-cluster-ca 2>/dev/null
# Named by its subject alternative names only: etcd's gateway refuses a
# client certificate with a common name once etcd's auth is on.
openssl req "${ec[@]}" -keyout tls.key -out tls.csr -subj /O=sluice 2>/dev/null
printf 'subjectAltName=DNS:sluice,DNS:sluice-etcd,DNS:*.sluice-etcd-peers\nextendedKeyUsage=serverAuth,clientAuth\n' > tls.ext
openssl x509 -req -in tls.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out tls.crt \
  -days "$days" -extfile tls.ext 2>/dev/null
rm -f tls.csr tls.ext ca.srl
echo "make-cluster-tls: wrote $dir/{ca.crt,ca.key,tls.crt,tls.key} (name: sluice, $days days)"
