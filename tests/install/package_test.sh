#!/bin/bash
# The Debian package in a fresh Debian 12 root: `cpack -G DEB` in the build
# directory, mmdebstrap of bookworm with the package installed by apt (its
# declared dependencies only), then in that root `sluice serve --demo`
# succeeds and `import sluice` works without PYTHONPATH.
# Needs root, mmdebstrap and Debian's mirror; exits 77 (skipped) without.
# Usage: package_test.sh BUILD_DIR
set -euo pipefail
build=$1
if [ "$(id -u)" -ne 0 ] || ! command -v mmdebstrap > /dev/null; then
  echo "package: skipped (needs root and mmdebstrap)"
  exit 77
fi
mirror=${SLUICE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
root=$(mktemp -d /tmp/sluice-package-XXXXXX)
trap 'umount "$root/root/proc" "$root/root/dev/shm" 2>/dev/null || true; rm -rf "$root"' EXIT
(cd "$build" && cpack -G DEB -B "$root/deb" > "$root/cpack.log" 2>&1) || { cat "$root/cpack.log"; exit 1; }
deb=$(ls "$root"/deb/sluice_*.deb)
echo "package: $(basename "$deb"), depends: $(dpkg-deb -f "$deb" Depends | cut -c1-120)..."
if ! mmdebstrap --variant=apt --customize-hook="copy-in $deb /tmp" \
    --customize-hook="chroot \"\$1\" apt-get install -y -qq /tmp/$(basename "$deb")" \
    bookworm "$root/root" "$mirror" > "$root/mmdebstrap.log" 2>&1; then
  if grep -q "Could not resolve\|Failed to fetch\|Temporary failure" "$root/mmdebstrap.log"; then
    echo "package: skipped (Debian's mirror $mirror unreachable)"
    exit 77
  fi
  tail -20 "$root/mmdebstrap.log"
  exit 1
fi
unshare -m --fork sh -c "mount -t proc proc '$root/root/proc' && \
  mount -t tmpfs tmpfs '$root/root/dev/shm' && \
  chroot '$root/root' sh -c 'cd /tmp && timeout 300 sluice serve --demo > demo.log 2>&1; \
    rc=\$?; tail -2 demo.log; [ \$rc -eq 0 ] && \
    python3 -c \"import sluice; print(\\\"python:\\\", sluice.__file__)\"'"
echo "package: OK"
