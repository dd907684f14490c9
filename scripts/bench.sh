#!/usr/bin/env bash
# `just bench`: box's save + verify and load's validate pass against the seed's shell
# pipeline and the best hand-written one (tar | zstd -T2 -3 | gpg -z 0), side by side in one
# run on generated corpora (issue 14's table), then the limit (issue 32): each pass a save
# makes, alone on the same corpus (backup_harness stages), the slowest, the two-core bound,
# and box's save + verify as a multiple of them; then encrypt-only and decrypt-only MiB/s
# and box's peak RSS. Asserts nothing; on a loaded machine read the ratios, not the seconds
# (the load average is printed).
#
#   BENCH_SHAPES    corpora, one after the other (default "home big source"):
#                   home: like an agent's home, BENCH_FILES small files + BENCH_LARGE_MB of
#                         large ones (1/4 random, 1/4 log-like text, 1/2 sparse-ish mixed)
#                   big:  fewer, larger files: BENCH_BIG_FILES files (default 48) in
#                         BENCH_LARGE_MB + 512 MiB, each a mix of random, text and zeros
#                   source: BENCH_FILES small source files (0.2-6 KB) in twenty
#                         repositories, plus BENCH_LARGE_MB * 5/8 MiB of large files (a third
#                         random: each repository's pack; a third log text; a third mostly
#                         zeros)
#   BENCH_FILES     small files (default 50000)
#   BENCH_LARGE_MB  MiB of large files (default 1024)
#   BENCH_DIR       work dir (default: a temp dir, removed afterwards)
#   BENCH_HB, BENCH_HARNESS  prebuilt hb and backup_harness instead of building; both or neither
#   BENCH_BEFORE    a dir with hb and backup_harness of an older commit: its box row is
#                   measured in the same run and printed as "box before"
#   BOX_PART_SIZE, BOX_STREAM_PARTS  as for box save (part size, parts the export may hold)
#   BENCH_RUNS      rounds of every pipeline, interleaved; rows are medians (default 3)
#   BENCH_SIM       1: also `box save` through the simulator against the seed's same steps
#                   (scripts/bench-sim.sh; needs root); default: 1 when root, else 0
#   CARGO_TARGET_DIR as usual
set -euo pipefail

cd "$(dirname "$0")/.."
FILES=${BENCH_FILES:-50000}
LARGE=${BENCH_LARGE_MB:-1024}
TARGET=${CARGO_TARGET_DIR:-target}
WORK=${BENCH_DIR:-$(mktemp -d)}
mkdir -p "$WORK"
[ -n "${BENCH_DIR:-}" ] || trap 'rm -rf "$WORK"' EXIT

if [ -n "${BENCH_HB:-}" ] && [ -n "${BENCH_HARNESS:-}" ]; then
  # Prebuilt binaries, e.g. of an older commit, for a before/after comparison.
  HB=$BENCH_HB
  HARNESS=$BENCH_HARNESS
  echo "==> using prebuilt $HB and $HARNESS"
else
  echo "==> building release binaries (hb, backup_harness)"
  cargo build --release -q -p hb-guest --bin hb
  cargo build --release -q -p box-host --example backup_harness
  HB=$TARGET/release/hb
  HARNESS=$TARGET/release/examples/backup_harness
fi

SHAPES=${BENCH_SHAPES:-home big source}
BIG_FILES=${BENCH_BIG_FILES:-48}
printf 'bench-passphrase\n' > "$WORK/pw"
export BOX_PASSPHRASE_FILE="$WORK/pw"
GNUPGHOME="$WORK/gnupg"; mkdir -m 700 -p "$GNUPGHOME"; export GNUPGHOME

# corpus SHAPE: generates (or reuses) $WORK/data-SHAPE.
corpus() {
local shape=$1 data="$WORK/data-$1"
local mark="$WORK/corpus-$shape-$FILES-$LARGE-$BIG_FILES.done"
if [ -f "$mark" ]; then
  echo "==> reusing the $shape corpus in $data"
else
rm -rf "$data" "$WORK"/corpus-"$shape"-*.done
echo "==> generating the $shape corpus in $data"
python3 - "$data" "$FILES" "$LARGE" "$shape" "$BIG_FILES" <<'PY'
import os, random, sys
root, nfiles, large_mb, shape, big_files = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
rng = random.Random(42)
home = os.path.join(root, "home", "agent")
words = [("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))) for _ in range(2000)]
os.makedirs(os.path.join(root, "logs"), exist_ok=True)
os.makedirs(os.path.join(home, ".config", "hermes-box"), exist_ok=True)
with open(os.path.join(home, ".config", "hermes-box", "runtime-manifest"), "w") as f:
    f.write("created_at=2026-11-29T12:00:00Z\nbase_image=bench\n")
mb = 1 << 20
def log_mib(line):
    chunk, n = [], 0
    while n < mb:
        s = f"2026-11-29T12:00:{line % 60:02d}Z INFO request id={line} path=/api/{rng.choice(words)} took={rng.randint(1, 999)}ms\n"
        chunk.append(s)
        n += len(s)
        line += 1
    return "".join(chunk).encode()[:mb], line
if shape == "big":
    # Fewer, larger files (models, databases, archives, logs): each MiB of each file is
    # random, log-like text or mostly zeros, in the thirds the home corpus has overall.
    big = os.path.join(home, "big")
    os.makedirs(big, exist_ok=True)
    total = large_mb + 512
    line = 0
    for i in range(big_files):
        with open(os.path.join(big, f"file{i:03d}.bin"), "wb") as f:
            for m in range(total // big_files):
                kind = (i + m) % 3
                if kind == 0:
                    f.write(rng.randbytes(mb))
                elif kind == 1:
                    data, line = log_mib(line)
                    f.write(data)
                else:
                    f.write(rng.randbytes(mb // 8) + bytes(mb - mb // 8))
    sys.exit(0)
if shape == "source":
    # Issue 41's third corpus: NFILES small source files (0.2-6 KB) in twenty repositories
    # with nested directories, plus LARGE_MB * 5/8 (640 MiB by default) of large files, a
    # third of them incompressible (each repository's pack), a third log text, a third
    # mostly zeros.
    kinds = [".rs", ".py", ".ts", ".md", ".json", ".toml", ".c", ".h", ".go", ".sh"]
    keywords = ["fn", "let", "return", "if", "else", "for", "match", "struct", "impl", "def", "import", "const", "{", "}", "(", ")", "=", "->", ";", "//"]
    def source(size):
        out, n = [], 0
        while n < size:
            indent = "    " * rng.randint(0, 3)
            line = indent + " ".join(rng.choice(keywords) if rng.random() < 0.4 else rng.choice(words) for _ in range(rng.randint(2, 12))) + "\n"
            out.append(line)
            n += len(line)
        return "".join(out).encode()[:size]
    repos = 20
    large = large_mb * 5 // 8
    third = max(1, large // 3)
    line = 0
    for r in range(repos):
        repo = os.path.join(home, "src", f"repo{r:02d}")
        subdirs = [os.path.join(repo, *[f"m{rng.randint(0, 9)}" for _ in range(rng.randint(1, 4))]) for _ in range(60)]
        for d in subdirs:
            os.makedirs(d, exist_ok=True)
        for i in range(nfiles // repos):
            d = subdirs[i % len(subdirs)]
            with open(os.path.join(d, f"f{i}{rng.choice(kinds)}"), "wb") as f:
                f.write(source(rng.randint(200, 6000)))
        pack = os.path.join(repo, ".git", "objects", "pack")
        os.makedirs(pack, exist_ok=True)
        with open(os.path.join(pack, "pack-0.pack"), "wb") as f:
            for _ in range(max(1, third // repos)):
                f.write(rng.randbytes(mb))
    with open(os.path.join(root, "logs", "agent.log"), "wb") as f:
        for _ in range(third):
            data, line = log_mib(line)
            f.write(data)
    os.makedirs(os.path.join(home, "big"), exist_ok=True)
    with open(os.path.join(home, "big", "cache.db"), "wb") as f:
        for _ in range(max(1, large - 2 * third)):
            f.write(rng.randbytes(mb // 8) + bytes(mb - mb // 8))
    sys.exit(0)
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
q = max(1, large_mb // 4)
with open(os.path.join(big, "random.bin"), "wb") as f:
    for _ in range(q):
        f.write(rng.randbytes(mb))
with open(os.path.join(root, "logs", "agent.log"), "wb") as f:
    line = 0
    for _ in range(q):
        data, line = log_mib(line)
        f.write(data)
with open(os.path.join(big, "mixed.db"), "wb") as f:
    for i in range(max(1, large_mb - 2 * q)):
        f.write(rng.randbytes(mb // 8) + bytes(mb - mb // 8))
os.symlink("random.bin", os.path.join(big, "link"))
PY
touch "$mark"
fi
rm -rf "$WORK/parts" "$WORK/scratch" "$WORK"/*.gpg "$WORK/plain.tar.zst"
du -sh "$data" | sed 's/^/    /'
find "$data" -type f | wc -l | sed 's/^/    files: /'
# Read the corpus once before any timed step: a reused corpus may have left the page cache,
# and the first row would pay for the disk while the others read memory. (Through cat:
# GNU tar skips reading file contents when its archive is /dev/null.)
tar cf - -C "$data" . | cat > /dev/null
}

for SHAPE in $SHAPES; do
corpus "$SHAPE"
echo "==> the $SHAPE corpus"
# run CMD: runs once, records wall, user+sys and peak RSS (of the largest process).
python3 - "$WORK" "$HB" "$HARNESS" "$SHAPE" <<'PY'
import os, subprocess, sys, time
work, hb, harness, shape = sys.argv[1:5]
data = os.path.join(work, f"data-{shape}")
pw = os.path.join(work, "pw")
gpg = "gpg --batch --yes --quiet --pinentry-mode loopback --passphrase-fd 3"

def run(cmd, shell=False, optional=False, keep_err=False):
    # Every timed run starts with nothing dirty in the page cache: what a run before left
    # unwritten (gpg does not fsync its output; box does) would otherwise be written back
    # by the kernel during a later run, on its cores and disk. On this kind of machine a
    # write-back costs 1 to 7 s of CPU per 600 MiB.
    os.sync()
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, shell=shell, executable="/bin/bash" if shell else None,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read().decode(errors="replace")
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.monotonic() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        if optional:
            return None
        sys.exit(f"failed: {cmd}\n{err}")
    if keep_err:
        return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0, err
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0

def sh(cmd):
    return run(f"set -o pipefail; exec 3<{pw}; {cmd}", shell=True)

def path(name):
    return os.path.join(work, name)

print(f"load average before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
import shutil
import statistics
RUNS = max(1, int(os.environ.get("BENCH_RUNS", "3")))

def one_round():
    """Every pipeline once, in the same order each round."""
    r = {}
    shutil.rmtree(path("parts"), ignore_errors=True)
    if os.path.exists(path("box.gpg")):
        os.remove(path("box.gpg"))
    # box save's way: `hb export --stream-parts` as a child of the harness, each announced part
    # copied, released and encrypted while the export goes on (CPU and RSS include hb's).
    shutil.rmtree(path("scratch"), ignore_errors=True)
    stream = run([harness, "save-stream", hb, data, path("scratch"), path("box.gpg")], optional=True, keep_err=True)
    if stream is not None:
        r["box save+verify (overlapped)"] = stream[:3]
        stages = [l for l in stream[3].splitlines() if l.startswith("stages:")]
        print("    " + (stages[0] if stages else "(no stage line)"))
    # The sequential way (an hb without --stream-parts): export to the end, then encrypt.
    r["box export (sequential)"] = run([hb, "export", "--root", data, "--out", path("parts")])
    # Each pass of a save alone, on hb's parts (scripts' limit table below).
    out = subprocess.run([harness, "stages", data, path("parts"), path("stages")],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"failed: backup_harness stages\n{out.stderr}")
    for line in out.stdout.splitlines():
        _, name, nbytes, wall, cpu, passes = line.split("\t")
        stage_runs.setdefault(name, []).append((int(nbytes), float(wall), float(cpu), int(passes)))
    seq_out = path("box.gpg") if stream is None else path("box-seq.gpg")
    r["box save (sequential)"] = run([harness, "save", path("parts"), seq_out])
    r["box validate"] = run([harness, "verify", path("box.gpg")])
    if stream is not None:
        os.remove(seq_out)
    before = os.environ.get("BENCH_BEFORE")
    if before:
        shutil.rmtree(path("parts-before"), ignore_errors=True)
        shutil.rmtree(path("scratch-before"), ignore_errors=True)
        b = run([os.path.join(before, "backup_harness"), "save-stream", os.path.join(before, "hb"), data, path("scratch-before"), path("before.gpg")], optional=True)
        if b is not None:
            r["box before save+verify (overlapped)"] = b
            os.remove(path("before.gpg"))
        r["box before export"] = run([os.path.join(before, "hb"), "export", "--root", data, "--out", path("parts-before")])
        r["box before save"] = run([os.path.join(before, "backup_harness"), "save", path("parts-before"), path("before.gpg")])
        r["box before validate"] = run([os.path.join(before, "backup_harness"), "verify", path("before.gpg")])
        shutil.rmtree(path("parts-before"))
        os.remove(path("before.gpg"))
    r["seed save"] = sh(f"tar czf - -C {data} . | {gpg} --symmetric --cipher-algo AES256 -o {path('seed.gpg')}")
    r["seed validate"] = sh(f"{gpg} -d {path('seed.gpg')} | tar tzf - >/dev/null")
    r["hand save"] = sh(f"tar cf - -C {data} . | zstd -q -T2 -3 | {gpg} -z 0 --symmetric --cipher-algo AES256 -o {path('hand.gpg')}")
    r["hand validate"] = sh(f"{gpg} -d {path('hand.gpg')} | zstd -q -d | tar tf - >/dev/null")
    # The same, with its output fsync'd before it counts as saved, as box's is.
    if os.path.exists(path("hand-synced.gpg")):
        os.remove(path("hand-synced.gpg"))
    r["hand save, fsync'd"] = sh(f"tar cf - -C {data} . | zstd -q -T2 -3 | {gpg} -z 0 --symmetric --cipher-algo AES256 -o {path('hand-synced.gpg')} && sync {path('hand-synced.gpg')}")
    os.remove(path("hand-synced.gpg"))
    return r

stage_runs = {}
# The rounds interleave the pipelines (box, before, seed, hand, box, ...), so a drift in
# the machine's speed hits them alike; each row is the median of its runs.
rounds = [one_round() for _ in range(RUNS)]
r = {}
for k in rounds[0]:
    runs = [x[k] for x in rounds if k in x]
    r[k] = (statistics.median(w for w, _, _ in runs), statistics.median(c for _, c, _ in runs), max(m for _, _, m in runs))
spread = {k: (min(x[k][0] for x in rounds if k in x), max(x[k][0] for x in rounds if k in x)) for k in r}
print(f"{RUNS} round(s); every row below is the median of its runs (BENCH_RUNS sets how many)")

# Encrypt-only and decrypt-only, on box's plaintext (the parts, concatenated).
plain = path("plain.tar.zst")
with open(plain, "wb") as out:
    for name in sorted(os.listdir(path("parts"))):
        if name.startswith("part-"):
            with open(os.path.join(path("parts"), name), "rb") as f:
                while chunk := f.read(1 << 20):
                    out.write(chunk)
mib = os.path.getsize(plain) / 2**20

def codec_round():
    """Each encrypt and decrypt once, box's and gpg's in turn."""
    for f in ("enc.gpg", "gpg-enc.gpg"):
        if os.path.exists(path(f)):
            os.remove(path(f))
    c = {}
    # (Optional: a harness older than issue 14 has none of these verbs.)
    c["box encrypt (bulk SEIPDv1 writer)"] = run([harness, "encrypt", plain, path("enc.gpg")], optional=True)
    c["gpg encrypt (-z 0)"] = sh(f"{gpg} -z 0 --symmetric --cipher-algo AES256 -o {path('gpg-enc.gpg')} {plain}")
    c["box decrypt, save's verifier (bulk)"] = run([harness, "decrypt-own", path("enc.gpg")], optional=True)
    c["box decrypt, load (bulk, box's shape)"] = run([harness, "decrypt", path("enc.gpg")], optional=True)
    c["gpg decrypt"] = sh(f"{gpg} -d {path('gpg-enc.gpg')} >/dev/null")
    return c

# Interleaved rounds, medians, as above: one run each let whichever ran first pay for
# the page cache's fresh pages.
codec_rounds = [codec_round() for _ in range(RUNS)]
c = {}
for k in codec_rounds[0]:
    runs = [x[k] for x in codec_rounds if x.get(k) is not None]
    c[k] = (statistics.median(w for w, _, _ in runs), statistics.median(u for _, u, _ in runs), max(m for _, _, m in runs)) if runs else None
print(f"load average after:  {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")

print(f"\n{'step (median)':40} {'wall s':>8} {'cpu s':>8} {'peak RSS MiB':>13} {'wall min-max':>14}")
for k, (w, cpu, rss) in r.items():
    lo, hi = spread[k]
    print(f"{k:40} {w:8.2f} {cpu:8.2f} {rss:13.1f} {lo:8.2f}-{hi:.2f}")

def vs(other, ours):
    return f"box {other / ours:.2f}x faster" if other >= ours else f"box {ours / other:.2f}x slower"
def table(i, what):
    seq_sv = r["box export (sequential)"][i] + r["box save (sequential)"][i]
    overlapped = "box save+verify (overlapped)" in r
    box_sv = r["box save+verify (overlapped)"][i] if overlapped else seq_sv
    seed_sv = r["seed save"][i] + r["seed validate"][i]
    hand_sv = r["hand save"][i] + r["hand validate"][i]
    box_v, seed_v, hand_v = r["box validate"][i], r["seed validate"][i], r["hand validate"][i]
    print(f"\n{what}:\n| pipeline | save + verify | load's validate pass |")
    print(f"|---|---|---|")
    if overlapped:
        print(f"| box (hb export overlapped with encrypt/validate/verify/publish, as box save) | {box_sv:.2f} s | {box_v:.2f} s |")
        print(f"| box, sequential (hb export, then encrypt...; an hb without --stream-parts) | {seq_sv:.2f} s ({vs(seq_sv, box_sv)}) | |")
    else:
        print(f"| box (hb export, then encrypt/validate/verify/publish) | {box_sv:.2f} s | {box_v:.2f} s |")
    if "box before save" in r:
        b_sv = r["box before export"][i] + r["box before save"][i]
        if "box before save+verify (overlapped)" in r:
            b_sv = r["box before save+verify (overlapped)"][i]
        b_v = r["box before validate"][i]
        print(f"| box before ($BENCH_BEFORE) | {b_sv:.2f} s ({vs(b_sv, box_sv)}) | {b_v:.2f} s ({vs(b_v, box_v)}) |")
    print(f"| the seed (tar czf; gpg --symmetric from stdin; gpg -d \\| tar tzf) | {seed_sv:.2f} s ({vs(seed_sv, box_sv)}) | {seed_v:.2f} s ({vs(seed_v, box_v)}) |")
    print(f"| best hand-written (tar \\| zstd -T2 -3 \\| gpg -z 0 --symmetric; gpg -d \\| zstd -d \\| tar t) | {hand_sv:.2f} s ({vs(hand_sv, box_sv)}) | {hand_v:.2f} s ({vs(hand_v, box_v)}) |")
table(0, "wall time (the issue's table)")
table(1, "CPU time, user + sys (steadier than wall on a shared machine)")

box_sv = r["box save+verify (overlapped)"] if "box save+verify (overlapped)" in r else None
hand_sv = [r["hand save"][i] + r["hand validate"][i] for i in (0, 1)]
seed_sv = [r["seed save"][i] + r["seed validate"][i] for i in (0, 1)]
if box_sv:
    print(f"\ngoals on the {shape} corpus (wall, medians):")
    print(f"  box save+verify / best hand-written: {box_sv[0] / hand_sv[0]:.2f} (goal <= 0.70; CPU {box_sv[1] / hand_sv[1]:.2f})")
    synced = [r["hand save, fsync'd"][i] + r["hand validate"][i] for i in (0, 1)]
    print(f"    ... / the same with its output fsync'd, as box's is: {box_sv[0] / synced[0]:.2f} (CPU {box_sv[1] / synced[1]:.2f})")
    print(f"  the seed's save+verify / box's:      {seed_sv[0] / box_sv[0]:.2f}x (goal >= 10; CPU {seed_sv[1] / box_sv[1]:.2f}x)")
    print(f"  the seed's verify / load's validate: {r['seed validate'][0] / r['box validate'][0]:.2f}x (goal >= 4; CPU {r['seed validate'][1] / r['box validate'][1]:.2f}x)")

# The limit: each pass alone (medians of the rounds), the slowest of them, and the bound two
# cores set on doing all of them (their CPU seconds, each times the passes a save makes of
# it, over two), against box's whole save + verify on the same corpus.
print(f"\nthe limit on the {shape} corpus: each pass of a save + verify alone (backup_harness stages; medians)")
print(f"| stage | MiB in | wall s | MiB/s | cpu s | passes | cpu s, all passes |")
print(f"|---|---|---|---|---|---|---|")
med = {k: (v[0][0], statistics.median(x[1] for x in v), statistics.median(x[2] for x in v), v[0][3]) for k, v in stage_runs.items()}
for k, (nbytes, wall, cpu, passes) in med.items():
    rate = nbytes / 2**20 / wall if wall > 0 else float("inf")
    print(f"| {k} | {nbytes / 2**20:.0f} | {wall:.2f} | {rate:.0f} | {cpu:.2f} | {passes} | {cpu * passes:.2f} |")
# A stage shown for its own speed (0 passes) runs inside another: not a pass of its own.
slowest = max((kv for kv in med.items() if kv[1][3] > 0), key=lambda kv: kv[1][1])
two_core = sum(cpu * passes for _, _, cpu, passes in med.values()) / 2
limit = max(slowest[1][1], two_core)
print(f"slowest stage: {slowest[0]}, {slowest[1][1]:.2f} s")
print(f"two cores doing every pass: {two_core:.2f} s (the CPU seconds of all passes / 2)")
print(f"the limit of this pipeline shape here: {limit:.2f} s")
if box_sv:
    print(f"box's save + verify: {box_sv[0]:.2f} s = {box_sv[0] / slowest[1][1]:.2f}x the slowest stage, {box_sv[0] / limit:.2f}x the limit (CPU {box_sv[1]:.2f} s = {box_sv[1] / (2 * two_core):.2f}x the passes' own)")

print(f"\non {mib:.0f} MiB of plaintext (box's .tar.zst; medians of {RUNS} interleaved round(s)):")
print(f"{'':40} {'wall s':>8} {'MiB/s':>8} {'cpu s':>8} {'MiB/cpu-s':>10} {'peak RSS MiB':>13}")
for k, v in c.items():
    if v is None:
        print(f"{k:40} {'n/a':>8}")
        continue
    w, cpu, rss = v
    print(f"{k:40} {w:8.2f} {mib / w:8.0f} {cpu:8.2f} {mib / cpu:10.0f} {rss:13.1f}")
box_rss = max(r["box save (sequential)"][2], r["box validate"][2], *(c[k][2] for k in c if k.startswith("box") and c[k]))
print(f"\npeak RSS of box: {box_rss:.1f} MiB (goal <= 64); hb export {r['box export (sequential)'][2]:.1f} MiB (in the guest)")
if "box save+verify (overlapped)" in r:
    print(f"peak RSS of the overlapped save: {r['box save+verify (overlapped)'][2]:.1f} MiB (the larger of the harness and its hb child)")
sizes = {k: os.path.getsize(path(f)) / 2**20 for k, f in (("box", "box.gpg"), ("seed", "seed.gpg"), ("hand-written", "hand.gpg"))}
print("backup sizes: " + ", ".join(f"{k} {v:.1f} MiB" for k, v in sizes.items()))
for f in ("plain.tar.zst", "enc.gpg", "gpg-enc.gpg"):
    if os.path.exists(path(f)):
        os.remove(path(f))
PY
done

# Through the simulator: `box save` of a box with a generated /data, by stage, against the
# seed's same steps (crates/box-host/tests/save_load_bench.rs; root for namespaced guests;
# SMOLVM_SIM_HOST_USERLAND=1 is its named fast-test shortcut: guests on this host's userland).
SIM=${BENCH_SIM:-$([ "$(id -u)" -eq 0 ] && echo 1 || echo 0)}
if [ "$SIM" = 1 ]; then
  echo
  echo "==> box save through the simulator (BENCH_MB=${BENCH_MB:-300} MiB of /data; BENCH_SIM=0 skips)"
  uptime
  cargo build --release -q -p smolvm-sim -p hb-guest
  cargo test --release -q -p box-host --test save_load_bench -- --ignored --nocapture 2>&1 \
    | grep -v '^running \|^test result\|^$\|^test bench_'
fi
