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

for t in "${targets[@]}"; do
    mkdir -p "$work/corpus/$t" "fuzz/artifacts/$t"
    echo "== fuzzing $t for ${seconds}s"
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags
    cargo fuzz run --fuzz-dir fuzz --target-dir "$work/fuzz" "$t" \
        "$work/corpus/$t" "fuzz/corpus/$t" "fuzz/regressions/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        ${FUZZ_ARGS:-}
done
