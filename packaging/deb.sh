#!/usr/bin/env bash
# Builds the Debian package of oxrdma (target/debian/oxrdma_<version>_<arch>.deb) from a
# release build, with dpkg-deb: the tool in /usr/bin, libibverbs.so.1 and librdmacm.so.1 in
# /usr/lib/oxrdma (a directory of their own: rdma-core's stay in place, and
# `oxrdma exec -- PROGRAM` runs a program on these), and a tmpfiles.d rule that makes the
# /dev/infiniband nodes UCX looks for, at boot and at install. Prints the package's path.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -q -p oxrdma-ibverbs -p oxrdma-rdmacm -p oxrdma-cli
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
out=target/debian
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
chmod 0755 "$stage"
install -D -m 0755 target/release/oxrdma "$stage/usr/bin/oxrdma"
install -D -m 0644 target/release/liboxrdma_ibverbs.so "$stage/usr/lib/oxrdma/libibverbs.so.1"
install -D -m 0644 target/release/liboxrdma_rdmacm.so "$stage/usr/lib/oxrdma/librdmacm.so.1"
strip --strip-debug "$stage/usr/bin/oxrdma" "$stage/usr/lib/oxrdma/"*.so.1
install -D -m 0644 packaging/oxrdma.tmpfiles "$stage/usr/lib/tmpfiles.d/oxrdma.conf"
install -D -m 0644 README.md "$stage/usr/share/doc/oxrdma/README.md"
install -D -m 0644 LICENSE-MIT "$stage/usr/share/doc/oxrdma/copyright"
mkdir -p "$stage/DEBIAN"
cat >"$stage/DEBIAN/control" <<CONTROL
Package: oxrdma
Version: $version
Architecture: $arch
Maintainer: oxrdma developers <oxrdma@example.invalid>
Depends: libc6 (>= 2.34)
Suggests: ibverbs-utils, perftest, rdmacm-utils
Section: net
Priority: optional
Installed-Size: $(du -sk "$stage/usr" | cut -f1)
Description: RDMA over RoCEv2 in user space, no kernel module or hardware
 oxrdma speaks the RoCEv2 wire protocol over UDP (wire-compatible with Linux rxe) and
 offers the verbs and RDMA CM ABIs of rdma-core: unmodified programs (perftest, rping,
 UCX, Open MPI, libfabric) run on it with "oxrdma exec -- PROGRAM". Its libraries live
 in /usr/lib/oxrdma and never replace rdma-core's.
CONTROL
# The nodes now, not only at the next boot (an existing one is left as it is).
cat >"$stage/DEBIAN/postinst" <<'POSTINST'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
  if command -v systemd-tmpfiles >/dev/null 2>&1; then
    systemd-tmpfiles --create /usr/lib/tmpfiles.d/oxrdma.conf || true
  else
    mkdir -p /dev/infiniband
    for n in 0 1 2 3 4 5 6 7; do
      [ -e /dev/infiniband/uverbs$n ] || mknod -m 0666 /dev/infiniband/uverbs$n c 1 3 || true
    done
  fi
fi
POSTINST
# Removed: the nodes this package made (the null device's numbers), and nothing else.
cat >"$stage/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ "$1" = remove ] || [ "$1" = purge ]; then
  for n in 0 1 2 3 4 5 6 7; do
    f=/dev/infiniband/uverbs$n
    if [ -c "$f" ] && [ "$(stat -c %t:%T "$f")" = 1:3 ]; then rm -f "$f"; fi
  done
  rmdir /dev/infiniband 2>/dev/null || true
fi
POSTRM
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/postrm"
mkdir -p "$out"
deb="$out/oxrdma_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$stage" "$deb" >/dev/null
echo "$deb"
