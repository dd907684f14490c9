#!/usr/bin/env bash
# A short box lifecycle: new -> ls -> doctor -> stop -> start -> doctor -> rm.
#
# Uses `smolvm` when it is on PATH; otherwise the bundled simulator `smolvm-sim` (real
# namespaced Linux guests that share this host's userland; needs root), and says so. State
# lives in a temp dir that is removed at the end, with every demo machine.
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
  echo "demo:         (its guests are namespaces over this host's userland, not microVMs)"
  if [ "$(id -u)" -ne 0 ]; then
    echo "demo: the simulator needs root (namespaces, overlay mounts); run: sudo just demo" >&2
    exit 1
  fi
  # The simulator boots pristine images by default; the demo (for now) opts into its named
  # fast-test shortcut, a guest on this host's userland, so it provisions offline.
  export SMOLVM_SIM_HOST_USERLAND=1
  # Provision from the tools this host already has (scripts/setup.sh), so the demo needs
  # no network; without them provisioning installs from npm.
  {
    echo "INSTALL_HERMES=0"
    echo "NODE_MAJOR=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 22)"
    echo "BOX_CPUS=2"
    echo "BOX_MEM_MIB=2048"
  } > "$BOX_CONFIG"
  tools=/var/lib/hermes-box-lifecycle-tools   # scripts/setup.sh; guests cannot see /opt
  if [ -x "$tools/bin/executor" ]; then
    ver() { node -p "require('$tools/lib/node_modules/$1/package.json').version" 2>/dev/null; }
    {
      echo "EXECUTOR_VERSION=$(ver executor)"
      echo "CODEX_VERSION=$(ver @openai/codex)"
      echo "CLAUDE_CODE_VERSION=$(ver @anthropic-ai/claude-code)"
    } >> "$BOX_CONFIG"
    export BOX_TEST_GUEST_ENV="HB_TOOL_PREFIX=$tools,PATH=$tools/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
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
