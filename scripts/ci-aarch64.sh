#!/usr/bin/env bash
# CI smoke check of the aarch64 guest helper (issue 8), run by .ci/run after `just test`:
#   1. cross-build `hb` for aarch64-unknown-linux-musl exactly as a release does
#      (cargo zigbuild, profile release-hb) and check it is a static AArch64 ELF ≤ 6 MiB;
#   2. run it under qemu-aarch64-static: `hb --version` (version and commit), `hb --help` and
#      `hb export --help` (export is a hidden verb, for box's use);
#   3. `hb export` the same small tree (fixed mtimes) with the x86_64 and the aarch64 `hb`:
#      the parts and the index must be identical byte for byte;
#   4. the aarch64 `hb import`s the x86_64 export, and `box extract` opens a gpg-encrypted
#      backup made from the aarch64 parts: both trees must equal the source tree.
# Cost on a fresh clone: the cold aarch64 build (about two minutes on two cores) plus seconds.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

step() { printf '\n==> %s\n' "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

step "toolchain (scripts/setup.sh --release: qemu-user-static, zig, cargo-zigbuild, rustup targets)"
bash scripts/setup.sh --release
command -v qemu-aarch64-static >/dev/null || die "qemu-aarch64-static is missing after setup"

readonly ARM=aarch64-unknown-linux-musl
# Its own target dir: release.sh builds with other RUSTFLAGS (path remapping) and source path.
release_target_dir=${CI_AARCH64_TARGET_DIR:-$repo/target-ci-aarch64}
host_target_dir=${CARGO_TARGET_DIR:-$repo/target}
version=$(cargo metadata --no-deps --format-version 1 | jq -r '.packages[] | select(.name == "hb-guest") | .version')
commit=$(git rev-parse --short=12 HEAD)

step "build hb for $ARM (cargo zigbuild --profile release-hb)"
t0=$(date +%s)
# The commit is pinned here so the check below holds even if HEAD moves during the build.
BOX_BUILD_COMMIT=$commit CARGO_TARGET_DIR=$release_target_dir cargo zigbuild -p hb-guest --bin hb --profile release-hb --target "$ARM"
echo "built in $(( $(date +%s) - t0 )) s"
hb_arm=$release_target_dir/$ARM/release-hb/hb

step "build the x86_64 hb and box (dev profile; \`just test\` has compiled them already)"
CARGO_TARGET_DIR=$host_target_dir cargo build -p hb-guest --bin hb -p box-host --bin box
hb_x86=$host_target_dir/debug/hb
box_x86=$host_target_dir/debug/box

step "the aarch64 hb is a static AArch64 ELF within the 6 MiB budget"
readelf -h "$hb_arm" | grep -q 'Machine:.*AArch64' || die "not an AArch64 ELF: $(file -b "$hb_arm")"
! readelf -l "$hb_arm" | grep -q 'program interpreter' || die "$hb_arm is dynamically linked"
size=$(stat -c %s "$hb_arm")
[ "$size" -le $((6 * 1024 * 1024)) ] || die "$hb_arm is $size bytes, over 6 MiB"
echo "hb ($ARM): $size bytes, $(file -b "$hb_arm" | cut -d, -f1-2)"

step "hb --version and hb --help under qemu-aarch64-static"
arm() { qemu-aarch64-static "$hb_arm" "$@"; }
got=$(arm --version)
echo "$got"
case "$got" in
  "hb $version ($commit"*) ;;
  *) die "aarch64 hb --version printed '$got', expected 'hb $version ($commit…)'" ;;
esac
arm --help | grep -q '^  status ' || die "aarch64 hb --help does not list its verbs"
arm export --help | grep -q -- '--part-size' || die "aarch64 hb export --help lacks --part-size"
echo "hb --help, hb export --help: OK"

step "a small tree with fixed mtimes: files, an executable, a private file, a symlink, a hardlink, long and non-ASCII names, 3 MiB of noise, an excluded dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree=$work/tree
mkdir -p "$tree/home/agent/.config/app" "$tree/home/agent/project/src" "$tree/logs" \
  "$tree/home/agent/project/node_modules/left-pad" "$tree/empty-dir"
printf 'hello from hermes-box-lite\n' >"$tree/home/agent/project/README.md"
printf '#!/bin/sh\necho run\n' >"$tree/home/agent/project/run.sh"
chmod 0755 "$tree/home/agent/project/run.sh"
printf 'token=not-a-secret\n' >"$tree/home/agent/.config/app/credentials"
chmod 0600 "$tree/home/agent/.config/app/credentials"
: >"$tree/logs/empty.log"
seq 1 20000 >"$tree/logs/numbers.log"
python3 -c 'import random, sys; random.seed(8); sys.stdout.buffer.write(random.randbytes(3 << 20))' \
  >"$tree/home/agent/project/src/noise.bin"
ln -s ../project/README.md "$tree/home/agent/.config/readme-link"
ln "$tree/logs/numbers.log" "$tree/logs/numbers-hardlink.log"
long=$(printf 'n%.0s' $(seq 1 140))
printf 'long name\n' >"$tree/home/agent/project/$long.txt"
printf 'ünïcödé\n' >"$tree/home/agent/project/grüße-日本.txt"
printf 'ignored\n' >"$tree/home/agent/project/node_modules/left-pad/index.js"
find "$tree" -exec touch -h -d @1700000000 {} +

step "hb export with x86_64 and aarch64 (1 MiB parts): byte-identical parts and index"
"$hb_x86" export --root "$tree" --out "$work/export-x86_64" --part-size 1048576
arm export --root "$tree" --out "$work/export-aarch64" --part-size 1048576
diff <(cd "$work/export-x86_64" && ls) <(cd "$work/export-aarch64" && ls) \
  || die "the two exports hold different file names"
for f in "$work/export-x86_64"/*; do
  cmp "$f" "$work/export-aarch64/$(basename "$f")" || die "$(basename "$f") differs between x86_64 and aarch64"
done
parts=$(find "$work/export-aarch64" -name 'part-*' | wc -l)
[ "$parts" -ge 2 ] || die "expected at least 2 parts, got $parts"
echo "identical: $parts parts + index; $(sha256sum "$work/export-aarch64/parts.index" | cut -c1-16)… parts.index"

# What a faithful copy of the tree looks like: paths, types, modes, mtimes, link targets,
# link counts of files, and file contents, minus the excluded node_modules and the top
# directory (the restoring side creates it).
skip=./home/agent/project/node_modules
listing() {
  (cd "$1" && find . -mindepth 1 -path "$skip" -prune -o -type f -printf '%p %y %m %n %T@\n' \
     -o -printf '%p %y %m %T@ %l\n' | LC_ALL=C sort)
}
contents() {
  (cd "$1" && find . -path "$skip" -prune -o -type l -printf '%p -> %l\n' | LC_ALL=C sort \
   && find . -path "$skip" -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
}

step "aarch64 hb import of the x86_64 export"
mkdir "$work/imported"
arm import --root "$work/imported" --from "$work/export-x86_64"
[ ! -e "$work/imported/$skip" ] || die "excluded node_modules came back"
# Import applies the data-root policy (home's mode, a quiesce marker so nothing starts
# before `hb up`), so only names, link targets and contents are compared here.
diff <(contents "$tree") <(contents "$work/imported" | grep -v '/\.config/hermes-box/quiesced$') \
  || die "the imported tree differs from the source"
echo "imported tree: same files, links and contents as the source"

step "box extract of a gpg-encrypted backup made from the aarch64 parts"
export GNUPGHOME=$work/gnupg BOX_HOME=$work/box-home
mkdir -m 0700 "$GNUPGHOME"
printf 'ci-aarch64 passphrase\n' >"$work/pass"
cat "$work/export-aarch64"/part-* >"$work/plain.tar.zst"
gpg --batch --quiet --pinentry-mode loopback --passphrase-file "$work/pass" \
  --symmetric --cipher-algo AES256 --compress-algo none \
  --output "$work/ci-20261129-000000.tar.zst.gpg" "$work/plain.tar.zst"
BOX_PASSPHRASE_FILE=$work/pass "$box_x86" extract "$work/ci-20261129-000000.tar.zst.gpg" "$work/extracted"
[ ! -e "$work/extracted/$skip" ] || die "excluded node_modules came back"
diff <(listing "$tree") <(listing "$work/extracted") || die "the extracted tree's metadata differs from the source"
diff <(contents "$tree") <(contents "$work/extracted") || die "the extracted tree's contents differ from the source"
echo "extracted tree equals the source"

step "aarch64 hb: OK (version, help, byte-identical export, import, box extract round trip)"
