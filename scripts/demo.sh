#!/usr/bin/env bash
# A short box lifecycle: new -> ls -> doctor -> stop -> start -> doctor -> rm.
#
# Uses `smolvm` when it is on PATH; otherwise the bundled simulator `smolvm-sim` (real
# namespaced Linux guests booting pristine Debian images; needs root), and says so. Either
# way it takes the user's path: the shipped box.env, provisioning from the network, and
# GUEST_CA_CERTS set to this host's CA bundle when the network inspects TLS. State lives
# in a temp dir that is removed at the end, with every demo machine.
set -euo pipefail

say() { printf '\n\033[1m### %s\033[0m\n' "$*"; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# The binaries: installed ones (`just install`), else this checkout's debug build.
pick() {
  if command -v "$1" >/dev/null 2>&1; then command -v "$1"
  elif [ -x "$root/target/debug/$1" ]; then echo "$root/target/debug/$1"
  else echo ""; fi
}
BOX=$(pick box)
if [ -z "$BOX" ]; then
  echo "demo: building box, hb and smolvm-sim (cargo build)"
  (cd "$root" && cargo build --quiet -p box-host -p hb-guest -p smolvm-sim)
  BOX="$root/target/debug/box"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/box-demo.XXXXXX")
export BOX_HOME="$work/box-home"
export SMOLVM_SIM_HOME="$work/sim-home"
export BOX_CONFIG="$work/box.env"
name=demo

if command -v smolvm >/dev/null 2>&1 && [ -z "${SMOLVM:-}" ]; then
  export SMOLVM=smolvm
  echo "demo: using smolvm $(smolvm --version 2>/dev/null | awk '{print $2}') from $(command -v smolvm)"
  cp "$root/box.env" "$BOX_CONFIG"
else
  SIM=$(pick smolvm-sim)
  if [ -z "$SIM" ]; then
    (cd "$root" && cargo build --quiet -p smolvm-sim -p hb-guest)
    SIM="$root/target/debug/smolvm-sim"
  fi
  export SMOLVM="$SIM"
  echo "demo: NOTICE: smolvm is not on PATH; using the simulator $SIM"
  echo "demo:         (its guests are namespaces over pristine Debian images, not microVMs)"
  if [ "$(id -u)" -ne 0 ]; then
    echo "demo: the simulator needs root (namespaces, overlay mounts); run: sudo just demo" >&2
    exit 1
  fi
  # The user's path: the shipped box.env, a pristine image (ubuntu:24.04 boots the
  # simulator's Debian 13 stand-in: no curl, no CA certificates, no sudo, no tmux, no
  # node) and provisioning from the real network (Debian archive, npm registry, PyPI).
  cp "$root/box.env" "$BOX_CONFIG"
  echo "demo: default box.env, pristine $(sed -n 's/^BASE_IMAGE=//p' "$BOX_CONFIG") image, provisioning from the network (a few minutes)"
fi

# A network that inspects TLS needs its CA in the guest: when this host's CA bundle trusts
# the npm registry and the stock (Mozilla) roots alone do not, hand the bundle to the box.
bundle=/etc/ssl/certs/ca-certificates.crt
if [ -z "${GUEST_CA_CERTS:-}" ] && [ -s "$bundle" ] && command -v curl >/dev/null \
  && ls /usr/share/ca-certificates/mozilla/*.crt >/dev/null 2>&1; then
  cat /usr/share/ca-certificates/mozilla/*.crt > "$work/stock-roots.pem"
  mkdir -p "$work/no-capath"   # curl also reads /etc/ssl/certs unless told otherwise
  if curl -fsS -o /dev/null --max-time 20 https://registry.npmjs.org/ \
    && ! curl -fsS -o /dev/null --max-time 20 --cacert "$work/stock-roots.pem" --capath "$work/no-capath" https://registry.npmjs.org/ 2>/dev/null; then
    sed -i "s|^GUEST_CA_CERTS=.*|GUEST_CA_CERTS=$bundle|" "$BOX_CONFIG"
    echo "demo: this network inspects TLS (the stock roots do not trust registry.npmjs.org, this host's bundle does):"
    echo "demo:   GUEST_CA_CERTS=$bundle added to the demo's box.env"
  fi
fi

cleanup() {
  set +e
  "$BOX" rm "$name" --force >/dev/null 2>&1
  if [ "${SMOLVM:-}" != smolvm ]; then
    "$SMOLVM" machine delete --name "$name" -f >/dev/null 2>&1
  fi
  rm -rf "$work"
}
trap cleanup EXIT

say "box new $name"
"$BOX" new "$name"
say "box ls"
"$BOX" ls
say "box doctor"
"$BOX" doctor
say "box stop $name"
"$BOX" stop "$name"
"$BOX" ls
say "box start $name"
"$BOX" start "$name"
say "box doctor $name"
"$BOX" doctor "$name"
say "box rm $name --force"
"$BOX" rm "$name" --force
"$BOX" ls
say "demo complete"
