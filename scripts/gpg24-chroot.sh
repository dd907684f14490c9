#!/usr/bin/env bash
# Builds, once, a small Debian 13 (trixie) chroot holding GnuPG 2.4, for the gpg interop
# tests (crates/box-host/tests/backup_interop.rs): this host's own gpg is Debian 12's 2.2,
# and backups from users' newer gpg (2.4's AEAD/OCB, its defaults) must be tested too.
#
#   gpg24-chroot.sh [CACHE_DIR]     default /var/cache/hermes-box-tests/gpg24
#
# Result: CACHE_DIR/rootfs with /usr/bin/gpg (2.4.x) and gpg-agent, and CACHE_DIR/built.env.
# Built in a temp dir beside it and renamed into place under a flock, so a half-built chroot
# is never used and two runs at once build it once; an existing one is left alone.
set -euo pipefail

cache=${1:-/var/cache/hermes-box-tests/gpg24}
suite=trixie
mirror=http://deb.debian.org/debian

mkdir -p "$(dirname "$cache")"
exec 9>"$cache.lock"
flock 9
if [ -x "$cache/rootfs/usr/bin/gpg" ]; then
  echo "gpg 2.4 chroot: present in $cache"
  exit 0
fi

tmp=$(mktemp -d "$cache.building.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
# essential + gpg + gpg-agent only: the smallest tree in which `chroot … gpg --symmetric`
# runs (about 40 MiB). No apt lists or package caches are kept.
mmdebstrap --variant=essential --include=gpg,gpg-agent --format=directory --quiet \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
  "$suite" "$tmp/rootfs" "$mirror" >"$tmp/build.log" 2>&1 || {
  echo "gpg24-chroot.sh: mmdebstrap $suite failed: $(tail -n 3 "$tmp/build.log")" >&2
  exit 1
}
version=$(chroot "$tmp/rootfs" gpg --version | head -n 1)
printf 'suite=%s\nversion=%s\nbuilt_at=%s\n' "$suite" "$version" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$tmp/built.env"
rm -f "$tmp/build.log"
rm -rf "$cache"
mv -T "$tmp" "$cache"
trap - EXIT
echo "gpg 2.4 chroot: built $version in $(( $(date +%s) - t0 ))s into $cache"
