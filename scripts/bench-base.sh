#!/usr/bin/env bash
# `just bench` (issue 15's part): boxes from a base through smolvm-sim on a pristine image,
# beside `box new --fresh` in the same run. Prints wall times; asserts nothing. One run, so
# on a loaded machine compare the rows, not the seconds (the load average is printed).
#
#   box base build                 (skipped, "current", when BENCH_BASE_DIR holds a fresh one)
#   box new --fresh                provisioning from the network, no base
#   box new from the base          smolvm 1.0.4 (private extraction per box), 1.9.2 and 1.33
#                                  (the shared pack store: first create extracts, then warm)
#   box load from the base         a box with BENCH_BASE_MB of /data (default 300, ~313 MiB
#                                  with the layout: scripts/bench.sh's save/load shape), on
#                                  1.0.4, 1.9.2 and 1.33
#
#   BENCH_BASE=0    skip this part of `just bench`
#   BENCH_BASE_DIR  state to reuse (box's state dir with its bases, the simulator's home);
#                   default: a temp dir, removed afterwards. A base build is minutes.
#   BENCH_BASE_BIN  a dir with prebuilt box, hb and smolvm-sim (default: cargo build --release)
#   BENCH_BASE_MB   MiB of /data for the load rows (default 300)
#   BENCH_GUEST_CA_CERTS  GUEST_CA_CERTS for the guests (default: the host's CA bundle, which
#                   a TLS-inspecting network needs)
# Needs root, slirp4netns, mmdebstrap (or the image cache scripts/setup.sh fills) and the
# network (the base build and --fresh install from the Debian archive, npm and PyPI).
set -euo pipefail

cd "$(dirname "$0")/.."
if [ "${BENCH_BASE:-1}" = 0 ]; then
  echo "==> bench-base skipped (BENCH_BASE=0)"
  exit 0
fi
TARGET=${CARGO_TARGET_DIR:-target}
MB=${BENCH_BASE_MB:-300}
WORK=${BENCH_BASE_DIR:-$(mktemp -d /tmp/bench-base.XXXXXX)}
[ -n "${BENCH_BASE_DIR:-}" ] || trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/sim" "$WORK/backups"

if [ "$(id -u)" != 0 ] || ! command -v slirp4netns >/dev/null; then
  echo "SKIPPED: bench-base needs root and slirp4netns (scripts/setup.sh installs it)"
  exit 0
fi
if [ -n "${BENCH_BASE_BIN:-}" ]; then
  BIN=$BENCH_BASE_BIN
  echo "==> using prebuilt binaries in $BIN"
else
  echo "==> building release binaries (box, hb, smolvm-sim)"
  cargo build --release -q -p box-host -p hb-guest -p smolvm-sim
  BIN=$TARGET/release
fi

CA=${BENCH_GUEST_CA_CERTS-/etc/ssl/certs/ca-certificates.crt}
grep -v -e '^GUEST_CA_CERTS=' -e '^BACKUP_DIR=' box.env > "$WORK/box.env"
[ -z "$CA" ] || [ ! -f "$CA" ] || echo "GUEST_CA_CERTS=$CA" >> "$WORK/box.env"
echo "BACKUP_DIR=$WORK/backups" >> "$WORK/box.env"
printf 'bench-base-passphrase\n' > "$WORK/passphrase"

# The user's path: the shipped configuration, a pristine image, no test hooks.
for k in SMOLVM_SIM_HOST_USERLAND SMOLVM_SIM_IMAGE_MAP SMOLVM_SIM_VERSION SMOLVM_SIM_FAIL \
  BOX_TEST_GUEST_ENV BOX_SMOLVM_TIMEOUT BOX_HB_BINARY BOX_PROVISION_DIR BOX_PASSPHRASE \
  SMOLVM_DISABLE_SHARED_EXTRACT; do unset "$k"; done
export BOX_HOME="$WORK/box-home" BOX_CONFIG="$WORK/box.env" BOX_PASSPHRASE_FILE="$WORK/passphrase"
export SMOLVM="$BIN/smolvm-sim" SMOLVM_SIM_HOME="$WORK/sim" NO_COLOR=1

python3 - "$BIN/box" "$SMOLVM" "$MB" <<'PY'
import os, subprocess, sys, time
box, sim, mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows, boxes = [], []

def run(label, args, version="1.0.4", marks=()):
    """Runs box; returns (seconds, stdout) and the seconds between marked lines."""
    env = dict(os.environ, SMOLVM_SIM_VERSION=version)
    t0 = time.monotonic()
    p = subprocess.Popen([box] + args, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    out, seen = [], {}
    for line in p.stdout:
        out.append(line)
        for m in marks:
            if m in line and m not in seen:
                seen[m] = time.monotonic() - t0
    wall = time.monotonic() - t0
    if p.wait() != 0:
        sys.exit(f"failed: box {' '.join(args)}\n{''.join(out[-30:])}")
    return wall, "".join(out), seen

def new(name, version, *extra):
    boxes.append((name, version))
    return run(f"new {name}", ["new", name, *extra], version)[0]

def cleanup():
    for name, version in boxes:
        subprocess.run([box, "rm", name, "--force"], capture_output=True,
                       env=dict(os.environ, SMOLVM_SIM_VERSION=version))

import atexit
atexit.register(cleanup)
print(f"==> load average: {os.getloadavg()[0]:.2f}")
print("==> box base build")
wall, out, seen = run("base build", ["base", "build"], marks=("[4/4] Packing", "Built base"))
ls = subprocess.run([box, "base", "ls", "--json"], capture_output=True, text=True, check=True)
import json
base = json.loads(ls.stdout)[0]
if "Built base" in out:
    pack = seen.get("Built base", wall) - seen.get("[4/4] Packing", 0)
    rows.append(("box base build", wall, f"pack {pack:.1f} s, {base['size_bytes'] / 2**20:.0f} MiB pack"))
else:
    rows.append(("box base build", None, f"current, built in {base['build_secs']} s earlier"))
print("==> box new --fresh (the network)")
rows.append(("box new --fresh", new("bench-fresh", "1.0.4", "--fresh"), "no base"))
print("==> box new from the base")
rows.append(("box new from base, 1.0.4", new("bench-a", "1.0.4"), "private extraction"))
first = new("bench-b", "1.9.2")
rows.append(("box new from base, 1.9.2 warm", new("bench-c", "1.9.2"),
             f"shared pack store (the first create: {first:.1f} s)"))
first = new("bench-d", "1.33.0")
rows.append(("box new from base, 1.33 warm", new("bench-e", "1.33.0"),
             f"the current smolvm, LAN closed (the first create: {first:.1f} s)"))
print(f"==> {mb} MiB of /data in bench-a, box save")
corpus = f"""set -e
C=/data/home/agent/corpus; mkdir -p $C && cd $C
for d in $(seq -w 0 99); do mkdir -p src/d$d; done
awk 'BEGIN {{ for (i = 0; i < 20000; i++) {{ f = sprintf("src/d%02d/f%05d.txt", i % 100, i); for (j = 0; j < 60; j++) print "line " j " of file " i " lorem ipsum dolor sit amet" > f; close(f) }} }}'
head -c {mb // 2}M /dev/urandom > blob.bin
yes 'INFO 2026-11-29T12:00:00Z request served in 12ms path=/api/v1/items status=200' | head -c {max(1, mb - mb // 2 - 66)}M > app.log
chown -R agent:agent $C; du -sm /data | cut -f1"""
r = subprocess.run([sim, "machine", "exec", "--name", "bench-a", "--", "/bin/bash", "-c", corpus],
                   capture_output=True, text=True, env=dict(os.environ, SMOLVM_SIM_VERSION="1.0.4"))
if r.returncode != 0:
    sys.exit(f"corpus failed: {r.stderr}")
data_mb = r.stdout.strip().splitlines()[-1]
wall, out, _ = run("save", ["save", "bench-a"])
import re
# "Saved and verified 151 MiB -> PATH (full: starts a chain)": the path, not what follows it.
backup = next(re.search(r" -> (.+?\.tar\.zst\.gpg)", l).group(1)
              for l in out.splitlines() if l.startswith("Saved and verified"))
print("==> box load from the base")
for version, name in (("1.0.4", "bench-l"), ("1.9.2", "bench-m"), ("1.33.0", "bench-n")):
    boxes.append((name, version))
    wall, _, _ = run("load", ["load", backup, name], version)
    rows.append((f"box load {data_mb} MiB from base, {version}", wall, ""))
print()
print(f"{'':38} {'wall':>8}")
for label, wall, note in rows:
    w = f"{wall:7.1f} s" if wall is not None else f"{'-':>9}"
    print(f"{label:38} {w}  {note}")
PY
