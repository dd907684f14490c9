#!/usr/bin/env bash
# Builds one pristine guest image for smolvm-sim into its cache, once.
#
#   build-image.sh CACHE_DIR REF        REF: debian:12 or debian:13 (the simulator's names)
#
# The simulator runs this very file (embedded with include_str!) on the first start of a
# machine whose image is not cached yet; scripts/setup.sh runs it to pre-build the images the
# tests need. One recipe, so the two can never disagree.
#
# What an image is: mmdebstrap --variant=minbase from the Debian archive, which is what the
# official OCI debian images are (debuerreotype builds them from minbase): bash, apt,
# coreutils, dpkg; no curl, no ca-certificates, no sudo, no systemd. Like an OCI image it ships
# empty apt lists (run `apt-get update` first) and a deb822 debian.sources over plain http.
#
# Layout: CACHE_DIR/<key>/rootfs (the read-only lower layer of every machine of that image)
# and CACHE_DIR/<key>/image.env (what was built, when, how big). It is built in a temp dir
# beside it and renamed into place, so a half-built image is never used; CACHE_DIR/<key>.lock
# (flock) makes two first starts at once build it once. Progress lines on stdout
# ("progress PERCENT WHAT") drive the simulator's pull-like progress bar; mmdebstrap's own
# output goes to CACHE_DIR/<key>.build.log.
set -euo pipefail

cache=${1:?usage: build-image.sh CACHE_DIR REF}
ref=${2:?usage: build-image.sh CACHE_DIR REF}

case "$ref" in
  debian:12) suite=bookworm ;;
  debian:13) suite=trixie ;;
  *) echo "build-image.sh: no recipe for image '$ref' (known: debian:12, debian:13)" >&2; exit 3 ;;
esac
key=${ref//:/_}
final="$cache/$key"
mirror=http://deb.debian.org/debian

mkdir -p "$cache"
exec 9>"$cache/$key.lock"
flock 9
if [ -d "$final/rootfs" ]; then
  echo "progress 100 cached"
  exit 0
fi

tmp=$(mktemp -d "$cache/.building-$key.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
log="$cache/$key.build.log"
: >"$log"
t0=$(date +%s)
echo "progress 5 resolving $suite from $mirror"

# The customize hook runs after the packages are in: make the tree look like the OCI image.
# - sources: deb822 debian.sources with the suite, -updates and -security, http only (the
#   image has no ca-certificates, so https would fail, exactly as in a stock image);
# - no apt lists and no package caches (an OCI image's first apt-get install needs an update);
# - no resolv.conf/hostname baked in (the runtime provides them per machine).
customize='set -e
root="$1"
rm -f "$root/etc/apt/sources.list"
mkdir -p "$root/etc/apt/sources.list.d"
cat >"$root/etc/apt/sources.list.d/debian.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: '"$suite $suite-updates"'
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: '"$suite-security"'
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
rm -f "$root/etc/resolv.conf" "$root/etc/hostname"
printf "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n" >"$root/etc/hosts"
'

# mmdebstrap prints "I: ..." stages; map the main ones onto a rough percentage. (errexit is
# off for the pipeline, so a failed build reaches the message below.)
set +e
mmdebstrap --variant=minbase --format=directory --verbose \
  --customize-hook="$customize" \
  "$suite" "$tmp/rootfs" "$mirror" 2>&1 | while IFS= read -r line; do
    printf '%s\n' "$line" >>"$log"
    case "$line" in
      *"I: running apt-get update"*) echo "progress 15 apt-get update" ;;
      *"I: downloading packages"*) echo "progress 30 downloading packages" ;;
      *"I: extracting archives"*) echo "progress 50 extracting" ;;
      *"I: installing essential packages"*) echo "progress 65 installing essential packages" ;;
      *"I: installing remaining packages"*) echo "progress 80 installing remaining packages" ;;
      *"I: running --customize-hook"*) echo "progress 90 customizing" ;;
    esac
  done
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ] || [ ! -x "$tmp/rootfs/bin/bash" ]; then
  echo "build-image.sh: mmdebstrap $suite failed (exit $status); see $log: $(tail -n 1 "$log")" >&2
  exit 1
fi
size=$(du -sxm "$tmp/rootfs" | cut -f1)
cat >"$tmp/image.env" <<META
ref=$ref
suite=$suite
mirror=$mirror
built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)
build_seconds=$(( $(date +%s) - t0 ))
size_mib=$size
META
mv -T "$tmp" "$final"
trap - EXIT
echo "progress 100 built $ref in $(( $(date +%s) - t0 ))s, ${size} MiB"
