#!/usr/bin/env bash
# `just bench`: our export+encrypt+verify against the seed's shell pipeline on a generated
# corpus like an agent's home. Prints wall time, CPU time and peak RSS of each side and the
# ratios. Asserts nothing.
#
#   BENCH_FILES     small files (default 50000)
#   BENCH_LARGE_MB  MiB of large files: 1/4 random, 1/4 log-like text, 1/2 sparse-ish
#                   mixed (default 1024)
#   BENCH_DIR       work dir (default: a temp dir, removed afterwards)
#   CARGO_TARGET_DIR as usual
set -euo pipefail

cd "$(dirname "$0")/.."
FILES=${BENCH_FILES:-50000}
LARGE=${BENCH_LARGE_MB:-1024}
TARGET=${CARGO_TARGET_DIR:-target}
WORK=${BENCH_DIR:-$(mktemp -d)}
[ -n "${BENCH_DIR:-}" ] || trap 'rm -rf "$WORK"' EXIT

echo "==> building release binaries (hb, backup_harness)"
cargo build --release -q -p hb-guest --bin hb
cargo build --release -q -p box-host --example backup_harness
HB=$TARGET/release/hb
HARNESS=$TARGET/release/examples/backup_harness

MARK="$WORK/corpus-$FILES-$LARGE.done"
if [ -f "$MARK" ]; then
  echo "==> reusing the corpus in $WORK/data"
else
rm -rf "$WORK/data" "$WORK"/corpus-*.done
echo "==> generating corpus: $FILES small files + $LARGE MiB of large files in $WORK/data"
python3 - "$WORK/data" "$FILES" "$LARGE" <<'PY'
import os, random, sys
root, nfiles, large_mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(42)
home = os.path.join(root, "home", "agent")
words = [("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))) for _ in range(2000)]
os.makedirs(os.path.join(root, "logs"), exist_ok=True)
os.makedirs(os.path.join(home, ".config", "hermes-box"), exist_ok=True)
with open(os.path.join(home, ".config", "hermes-box", "runtime-manifest"), "w") as f:
    f.write("created_at=2026-11-29T12:00:00Z\nbase_image=bench\n")
dirs = [os.path.join(home, "workspace", f"proj{d // 25}", f"dir{d}") for d in range(max(1, nfiles // 100))]
for d in dirs:
    os.makedirs(d, exist_ok=True)
for i in range(nfiles):
    d = dirs[i % len(dirs)]
    size = rng.randint(200, 16000)
    if i % 10 < 3:
        data = rng.randbytes(size)
    else:
        data = " ".join(rng.choice(words) for _ in range(size // 6)).encode()[:size]
    with open(os.path.join(d, f"f{i}.txt"), "wb") as f:
        f.write(data)
big = os.path.join(home, "big")
os.makedirs(big, exist_ok=True)
mb = 1 << 20
q = max(1, large_mb // 4)
with open(os.path.join(big, "random.bin"), "wb") as f:
    for _ in range(q):
        f.write(rng.randbytes(mb))
with open(os.path.join(root, "logs", "agent.log"), "wb") as f:
    line = 0
    for _ in range(q):
        chunk = []
        n = 0
        while n < mb:
            s = f"2026-11-29T12:00:{line % 60:02d}Z INFO request id={line} path=/api/{rng.choice(words)} took={rng.randint(1, 999)}ms\n"
            chunk.append(s)
            n += len(s)
            line += 1
        f.write("".join(chunk).encode()[:mb])
with open(os.path.join(big, "mixed.db"), "wb") as f:
    for i in range(max(1, large_mb - 2 * q)):
        f.write(rng.randbytes(mb // 8) + bytes(mb - mb // 8))
os.symlink("random.bin", os.path.join(big, "link"))
PY
touch "$MARK"
fi
rm -rf "$WORK/parts" "$WORK"/*.gpg
du -sh "$WORK/data" | sed 's/^/    /'
printf 'bench-passphrase\n' > "$WORK/pw"
export BOX_PASSPHRASE_FILE="$WORK/pw"
GNUPGHOME="$WORK/gnupg"; mkdir -m 700 -p "$GNUPGHOME"; export GNUPGHOME

# run NAME CMD...: runs once, records wall, user+sys and peak RSS (of the largest process).
python3 - "$WORK" "$HB" "$HARNESS" <<'PY'
import os, subprocess, sys, time
work, hb, harness = sys.argv[1:4]
data = os.path.join(work, "data")

def run(cmd, shell=False):
    for p in ("parts", "ours.tar.zst.gpg", "seed.tar.gz.gpg"):
        pass
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, shell=shell, executable="/bin/bash" if shell else None,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    err = proc.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {cmd}\n{err}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0

gpg = "gpg --batch --yes --pinentry-mode loopback --passphrase-fd 3"
pw = os.path.join(work, "pw")
rows = {}
rows["ours: hb export (tar+zstd, parts)"] = run([hb, "export", "--root", data, "--out", os.path.join(work, "parts")])
rows["ours: encrypt+validate+verify+publish"] = run([harness, "save", os.path.join(work, "parts"), os.path.join(work, "ours.tar.zst.gpg")])
rows["ours: decrypt+validate (load pass 1)"] = run([harness, "verify", os.path.join(work, "ours.tar.zst.gpg")])
rows["seed: tar czf | gpg --symmetric"] = run(f"tar czf - -C {data} . | {gpg} --symmetric --cipher-algo AES256 -o {work}/seed.tar.gz.gpg 3<{pw}", shell=True)
rows["seed: gpg -d | tar tzf (verify)"] = run(f"{gpg} -d {work}/seed.tar.gz.gpg 3<{pw} | tar tzf - >/dev/null", shell=True)

print(f"\n{'step':42} {'wall s':>8} {'cpu s':>8} {'peak RSS MiB':>13}")
for k, (w, c, r) in rows.items():
    print(f"{k:42} {w:8.2f} {c:8.2f} {r:13.1f}")
ours = [rows["ours: hb export (tar+zstd, parts)"], rows["ours: encrypt+validate+verify+publish"]]
seed = [rows["seed: tar czf | gpg --symmetric"], rows["seed: gpg -d | tar tzf (verify)"]]
ow, oc, orss = sum(r[0] for r in ours), sum(r[1] for r in ours), max(r[2] for r in ours)
sw, sc, srss = sum(r[0] for r in seed), sum(r[1] for r in seed), max(r[2] for r in seed)
print(f"\nexport+encrypt+verify: ours {ow:.2f} s wall, {oc:.2f} s CPU, {orss:.1f} MiB peak")
print(f"                       seed {sw:.2f} s wall, {sc:.2f} s CPU, {srss:.1f} MiB peak")
print(f"ratios (seed/ours): wall {sw/ow:.2f}x faster, CPU {sc/oc:.2f}x less")
size = os.path.getsize(os.path.join(work, "ours.tar.zst.gpg"))
print(f"backup sizes: ours {size/2**20:.1f} MiB, seed {os.path.getsize(os.path.join(work, 'seed.tar.gz.gpg'))/2**20:.1f} MiB")
print(f"decrypt peak RSS on a {size/2**20:.0f} MiB backup: {rows['ours: decrypt+validate (load pass 1)'][2]:.1f} MiB (goal <= 64)")
PY
