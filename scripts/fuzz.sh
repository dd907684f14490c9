#!/usr/bin/env bash
# Fuzz box-proto's parsers with cargo-fuzz (libFuzzer): `just fuzz [target] [seconds]`.
#
#   scripts/fuzz.sh                      every target in turn, 60 s each
#   scripts/fuzz.sh archive_tar 600      one target for ten minutes
#   FUZZ_ARGS="-max_len=65536" scripts/fuzz.sh manifest   extra libFuzzer flags
#
# cargo-fuzz passes -Z flags to rustc, which stable Rust refuses unless RUSTC_BOOTSTRAP=1
# (this project builds on stable only; no nightly toolchain is needed or downloaded).
# New inputs go to target-fuzz/corpus/<target>/ (not checked in); the seeds in
# fuzz/corpus/<target>/ and the reproducers in fuzz/regressions/<target>/ are read only.
# A crash lands in fuzz/artifacts/<target>/: minimise it with
#   RUSTC_BOOTSTRAP=1 cargo fuzz tmin --fuzz-dir fuzz <target> <file>
# and check it into fuzz/regressions/<target>/, where `cargo test -p box-proto` replays it.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.1
target="${1:-}"
seconds="${2:-60}"

if ! cargo fuzz --version 2>/dev/null | grep -qF "$CARGO_FUZZ_VERSION"; then
    cargo install --locked "cargo-fuzz@$CARGO_FUZZ_VERSION"
fi

export RUSTC_BOOTSTRAP=1
work="$PWD/target-fuzz"
targets=()
if [[ -n "$target" ]]; then
    targets=("$target")
else
    mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
fi

# Issue 13: the third-party archives beside the repo (../shared/ext-archives, never copied
# into it) are seeds of the two archive targets, converted at run time into each target's
# input form: `home/` + `home/agent/` in front, then gzip'd (archive_validate) or behind
# `#raw` (archive_tar, raw tar zstd'd by the target). Missing corpus: a visible note.
ext="$PWD/../shared/ext-archives"
seeds_for() { # target -> extra corpus dir (or nothing)
    local t="$1" out="$work/ext-seeds/$1"
    [[ "$t" == archive_validate || "$t" == archive_tar ]] || return 0
    if [[ ! -d "$ext" ]]; then
        echo "note: $ext is missing; fuzzing $t without the ext-archives seeds" >&2
        return 0
    fi
    mkdir -p "$out"
    python3 - "$ext" "$out" "$t" <<'PY'
import gzip, io, os, sys, tarfile
ext, out, target = sys.argv[1:]
prefix = b""
for name in ("home/", "home/agent/"):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, 1700000000
    prefix += info.tobuf(format=tarfile.USTAR_FORMAT)
for name in sorted(os.listdir(ext)):
    if not name.endswith(".tar"):
        continue
    with open(os.path.join(ext, name), "rb") as f:
        data = prefix + f.read()
    seed = gzip.compress(data, mtime=0) if target == "archive_validate" else b"#raw\n" + data
    with open(os.path.join(out, name), "wb") as f:
        f.write(seed)
PY
    echo "$out"
}

for t in "${targets[@]}"; do
    mkdir -p "$work/corpus/$t" "fuzz/artifacts/$t"
    extra="$(seeds_for "$t")"
    echo "== fuzzing $t for ${seconds}s"
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags
    cargo fuzz run --fuzz-dir fuzz --target-dir "$work/fuzz" "$t" \
        "$work/corpus/$t" "fuzz/corpus/$t" "fuzz/regressions/$t" ${extra:+"$extra"} -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        ${FUZZ_ARGS:-}
done
