#!/usr/bin/env bash
# A short box lifecycle: base build -> new -> ls -> doctor -> stop -> start -> doctor ->
# save -> a change -> incremental save -> backups -> load the newest (its chain) into a
# second box -> clone -> rm, each timed.
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
export BACKUP_DIR="$work/backups"
# The demo's own passphrase, in a 0600 file (never on a command line).
export BOX_PASSPHRASE_FILE="$work/passphrase"
(umask 077 && head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$BOX_PASSPHRASE_FILE")
name=demo
restored=demo-restored
branch=demo-branch

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
  for b in "$name" "$restored" "$branch"; do
    "$BOX" rm "$b" --force >/dev/null 2>&1
    if [ "${SMOLVM:-}" != smolvm ]; then
      "$SMOLVM" machine delete --name "$b" -f >/dev/null 2>&1
    fi
  done
  rm -rf "$work"
}
trap cleanup EXIT

# Runs a command and says how long it took.
timed() {
  local t0 t1
  t0=$(date +%s.%N)
  "$@"
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "\033[2m(took %.1f s)\033[0m\n", b - a }'
}
# A shell command inside a box, as root (the demo's way to make a change).
in_box() { "$SMOLVM" machine exec --name "$1" -- sh -c "$2"; }
newest_backup() { ls -1t "$BACKUP_DIR"/"$name"-*.tar.zst.gpg | head -n 1; }

say "box base build (provision once; new, load and clone then start from it)"
timed "$BOX" base build
say "box new $name"
timed "$BOX" new "$name"
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

say "box save $name"
timed "$BOX" save "$name"
say "a change in $name: a note in the agent's workspace"
in_box "$name" "printf 'saved twice\n' > /data/home/agent/workspace/NOTE.md && chown agent:agent /data/home/agent/workspace/NOTE.md"
say "box save $name (again: only what changed, an incremental backup)"
timed "$BOX" save "$name"
say "box backups $name"
"$BOX" backups "$name"
say "box load $(basename "$(newest_backup)") $restored"
timed "$BOX" load "$(newest_backup)" "$restored"
in_box "$restored" "cat /data/home/agent/workspace/NOTE.md"
say "box clone $name $branch (no backup file, no passphrase)"
timed "$BOX" clone "$name" "$branch"
in_box "$branch" "cat /data/home/agent/workspace/NOTE.md"
"$BOX" ls

say "box rm $name $restored $branch --force"
for b in "$name" "$restored" "$branch"; do "$BOX" rm "$b" --force; done
"$BOX" ls
say "demo complete"
