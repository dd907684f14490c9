#!/usr/bin/env bash
# Cross-built, reproducible release tarballs in dist/ (issue 8).
#
#   scripts/release.sh            build the committed HEAD into dist/
#   scripts/release.sh --check    build twice (source unpacked afresh, separate target dirs),
#                                 compare the bytes
#
# What comes out, for version V (the workspace version) and commit C (HEAD):
#   dist/hermes-box-lite-V-<target>.tar.gz  for every box target below, each holding
#       box, hb-x86_64-linux, hb-aarch64-linux, README.md, box.env, provision/,
#       completions/{box.bash,_box,box.fish}, man/man1/box.1
#   dist/SHA256SUMS, dist/BUILDINFO (commit, toolchain, what was and was not produced)
#
# How: the source is `git archive HEAD` unpacked into a fixed directory (RELEASE_SRC_DIR,
# default /tmp/hermes-box-lite-release/src), so a release is exactly a commit, never someone's
# half-edited working tree, and builds the same bytes wherever the checkout lives.
# BOX_RELEASE_BUILD=1 drops box's development fallback to its source tree for provision/
# (env!("CARGO_MANIFEST_DIR"), which path remapping cannot reach); the checks below refuse a
# box that still names the source dir.
# `hb` is a static musl binary for both guest architectures (profile release-hb); `box` is a
# glibc >= 2.28 binary for Linux (see DEFAULT_BOX_TARGETS) and, when zig can link it, a
# Mach-O for aarch64 macOS. Everything links with zig via cargo-zigbuild
# because zstd-sys and the bundled SQLite compile C. Reproducibility: BOX_BUILD_COMMIT and
# SOURCE_DATE_EPOCH come from the commit, every build path is remapped (rustc and C), and the
# tarballs are made with sorted names, fixed mtime/owner/mode and `gzip -n`.
#
# Options:
#   --check              build twice into two fresh trees and compare every output byte
#   --worktree           build the working tree as it is (commit is marked "-dirty" when the
#                        tree has changes; provision/ may be missing); for trying things out
#   --allow-lock-update  let cargo resolve when the commit's Cargo.lock is stale
#                        (the build is then reproducible only while the registry is unchanged)
#   --box-targets "T…"   box targets to package (default: x86_64 and aarch64 Linux gnu, and
#                        aarch64 macOS; the musl targets are accepted too)
#   --out DIR            where the tarballs go (default: dist)
# Environment: CARGO_TARGET_DIR (default: <repo>/target-release), RELEASE_SRC_DIR.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

readonly HB_TARGETS=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl)
readonly ALL_BOX_TARGETS=(
  x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu aarch64-apple-darwin
  x86_64-unknown-linux-musl aarch64-unknown-linux-musl
)
# box for Linux links glibc dynamically with a floor of GLIBC_FLOOR (zig picks the symbol
# versions): the allocator the backup engine was measured with. A static musl box builds and
# passes the same checks (--box-targets); `hb` is static musl regardless.
readonly DEFAULT_BOX_TARGETS=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu aarch64-apple-darwin)
readonly GLIBC_FLOOR=2.28
readonly HB_MAX_BYTES=$((6 * 1024 * 1024))
export MACOSX_DEPLOYMENT_TARGET=12.0

log() { printf '==> %s\n' "$*"; }
warn() { printf 'warning: %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

check=0 worktree=0 allow_lock_update=0 out_dir=dist
box_targets=("${DEFAULT_BOX_TARGETS[@]}")
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=1 ;;
    --worktree) worktree=1 ;;
    --allow-lock-update) allow_lock_update=1 ;;
    --box-targets) [ $# -ge 2 ] || die "--box-targets needs a list"; read -r -a box_targets <<<"$2"; shift ;;
    --out) [ $# -ge 2 ] || die "--out needs a directory"; out_dir=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see scripts/release.sh --help)" ;;
  esac
  shift
done
host_target=
for t in "${box_targets[@]}"; do
  case " ${ALL_BOX_TARGETS[*]} " in *" $t "*) ;; *) die "unknown box target '$t' (known: ${ALL_BOX_TARGETS[*]})" ;; esac
  # The first x86_64 Linux box runs here and writes the completions and the man page.
  case "$t" in x86_64-unknown-linux-*) [ -n "$host_target" ] || host_target=$t ;; esac
done
[ -n "$host_target" ] || die "--box-targets needs an x86_64 Linux target: that box writes the completions and man page"

# zig_target T: the target as cargo-zigbuild takes it (gnu targets carry the glibc floor).
zig_target() {
  case "$1" in *-linux-gnu) echo "$1.$GLIBC_FLOOR" ;; *) echo "$1" ;; esac
}

# --- tools ----------------------------------------------------------------------------------
need_tools() {
  local missing=() t
  for t in git cargo rustc rustup cargo-zigbuild tar gzip sha256sum jq readelf file python3; do
    command -v "$t" >/dev/null 2>&1 || missing+=("$t")
  done
  python3 -m ziglang version >/dev/null 2>&1 || missing+=("zig (pip ziglang)")
  local installed
  installed=$(rustup target list --installed)
  for t in "${HB_TARGETS[@]}" "${box_targets[@]}"; do
    grep -qx "$t" <<<"$installed" || missing+=("rustup target $t")
  done
  [ ${#missing[@]} -eq 0 ] || die "missing: ${missing[*]}. Run: bash scripts/setup.sh --release"
}

# --- one complete build ---------------------------------------------------------------------
# build_release TARGET_DIR OUT_DIR: everything from source to tarballs and SHA256SUMS.
build_release() {
  local target_dir=$1 out=$2
  local src commit sde version
  mkdir -p "$target_dir"
  target_dir=$(cd "$target_dir" && pwd)

  # $rev (the full hash) is resolved once in main: HEAD may move while we build.
  commit=$(git rev-parse --short=12 "$rev")
  sde=$(git log -1 --format=%ct "$rev")
  if [ "$worktree" -eq 1 ]; then
    src=$repo
    if [ -n "$(git status --porcelain)" ]; then
      commit="$commit-dirty"
      warn "building the working tree with uncommitted changes: commit recorded as $commit"
    fi
  else
    src=$src_dir
    log "source: git archive $commit -> $src"
    rm -rf "$src"
    mkdir -p "$src"
    git archive --format=tar "$rev" | tar -x -C "$src"
  fi

  version=$(cd "$src" && cargo metadata --no-deps --format-version 1 --offline 2>/dev/null \
    | jq -r '.packages[] | select(.name == "box-host") | .version') || true
  [ -n "$version" ] || die "cannot read the workspace version from $src/Cargo.toml"

  local -a lock_flag=(--locked)
  if [ "$worktree" -eq 1 ] || [ "$allow_lock_update" -eq 1 ]; then
    lock_flag=()
  elif ! (cd "$src" && cargo metadata --format-version 1 --locked >/dev/null 2>&1); then
    die "Cargo.lock in commit $commit does not match its Cargo.toml files; commit an up-to-date Cargo.lock (or pass --allow-lock-update for a build that is not pinned)"
  fi

  local cargo_home=${CARGO_HOME:-$HOME/.cargo} rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
  local zig_cache=${ZIG_GLOBAL_CACHE_DIR:-$HOME/.cache/zig}
  local -a maps=(
    "$src=/hermes-box-lite-$version"
    "$target_dir=/target"
    "$cargo_home=/cargo"
    "$rustup_home=/rustup"
    "$zig_cache=/zig-cache"
  )
  local rustflags="" cflags="" m
  for m in "${maps[@]}"; do
    rustflags+=" --remap-path-prefix=$m"
    cflags+=" -ffile-prefix-map=$m"
  done

  # Everything a build reads that could differ between two runs is fixed here.
  export CARGO_TARGET_DIR=$target_dir
  export SOURCE_DATE_EPOCH=$sde
  export BOX_BUILD_COMMIT=$commit
  export BOX_RELEASE_BUILD=1
  export RUSTFLAGS="${rustflags# }"
  export CARGO_INCREMENTAL=0
  export TZ=UTC LC_ALL=C
  local t tu
  for t in "${ALL_BOX_TARGETS[@]}"; do
    tu=${t//-/_}
    export "CFLAGS_$tu=${cflags# }"
  done

  local provision_note="provision/: included"
  if [ ! -d "$src/provision" ] || [ -z "$(ls -A "$src/provision")" ]; then
    provision_note="provision/: MISSING from this source tree, not in the tarballs"
    warn "provision/ is missing or empty in $src; the tarballs go without it"
  fi

  local t0 t1
  t0=$(date +%s)
  # hb first: it is the smaller build, and every box tarball carries both.
  for t in "${HB_TARGETS[@]}"; do
    log "cargo zigbuild hb --target $t --profile release-hb"
    (cd "$src" && cargo zigbuild "${lock_flag[@]}" -p hb-guest --bin hb --profile release-hb --target "$t")
  done
  local -a built_box=() failed_box=()
  # The host box comes first: it writes the completions and the man page for every tarball.
  local -a order=("$host_target")
  for t in "${box_targets[@]}"; do [ "$t" = "$host_target" ] || order+=("$t"); done
  for t in "${order[@]}"; do
    log "cargo zigbuild box --target $(zig_target "$t") --release"
    if (cd "$src" && cargo zigbuild "${lock_flag[@]}" -p box-host --bin box --release --target "$(zig_target "$t")" \
          2>&1 | tee "$target_dir/build-box-$t.log"; exit "${PIPESTATUS[0]}"); then
      built_box+=("$t")
    elif [ "$t" = aarch64-apple-darwin ]; then
      warn "box for $t did not build or link; see $target_dir/build-box-$t.log. No macOS tarball."
      failed_box+=("$t")
    else
      die "box for $t failed to build (log: $target_dir/build-box-$t.log)"
    fi
  done
  t1=$(date +%s)
  log "compiled in $((t1 - t0)) s"

  # --- verify the binaries --------------------------------------------------------------
  local hb_x86=$target_dir/x86_64-unknown-linux-musl/release-hb/hb
  local hb_arm=$target_dir/aarch64-unknown-linux-musl/release-hb/hb
  local host_box=$target_dir/$host_target/release/box
  verify_static_elf "$hb_x86" X86-64
  verify_static_elf "$hb_arm" AArch64
  local f size
  for f in "$hb_x86" "$hb_arm"; do
    size=$(stat -c %s "$f")
    [ "$size" -le "$HB_MAX_BYTES" ] || die "$f is $size bytes, over the 6 MiB budget"
  done
  expect_version "hb" "$version" "$commit" "$hb_x86"
  if command -v qemu-aarch64-static >/dev/null 2>&1; then
    expect_version "hb" "$version" "$commit" qemu-aarch64-static "$hb_arm"
  else
    warn "qemu-aarch64-static missing: the aarch64 hb was not run (bash scripts/setup.sh --release)"
  fi
  for t in "${built_box[@]}"; do
    local b=$target_dir/$t/release/box
    case "$t" in
      x86_64-unknown-linux-musl) verify_static_elf "$b" X86-64; expect_version box "$version" "$commit" "$b" ;;
      aarch64-unknown-linux-musl)
        verify_static_elf "$b" AArch64
        if command -v qemu-aarch64-static >/dev/null 2>&1; then
          expect_version box "$version" "$commit" qemu-aarch64-static "$b"
        fi ;;
      x86_64-unknown-linux-gnu) verify_glibc_elf "$b" X86-64; expect_version box "$version" "$commit" "$b" ;;
      aarch64-unknown-linux-gnu)
        verify_glibc_elf "$b" AArch64
        if command -v qemu-aarch64-static >/dev/null 2>&1 && [ -d /usr/aarch64-linux-gnu/lib ]; then
          expect_version box "$version" "$commit" qemu-aarch64-static -L /usr/aarch64-linux-gnu "$b"
        else
          warn "not run: $b needs qemu-aarch64-static and libc6-arm64-cross (bash scripts/setup.sh --release)"
        fi ;;
      aarch64-apple-darwin) verify_macho "$b" ;;
    esac
    # box names no build path at all: not the source dir, a checkout or a cache.
    if [ "$worktree" -eq 0 ]; then
      verify_no_build_paths "$b" "$src" "$repo" "$target_dir" "$cargo_home" "$HOME"
    else
      verify_no_build_paths "$b" "$target_dir" "$cargo_home" "$HOME"
    fi
  done
  verify_no_build_paths "$hb_x86" "$src" "$repo" "$target_dir" "$cargo_home" "$HOME"
  verify_no_build_paths "$hb_arm" "$src" "$repo" "$target_dir" "$cargo_home" "$HOME"

  # --- assemble ---------------------------------------------------------------------------
  local gen=$target_dir/generated
  rm -rf "$gen"
  mkdir -p "$gen/completions" "$gen/man/man1"
  "$host_box" completions bash >"$gen/completions/box.bash"
  "$host_box" completions zsh >"$gen/completions/_box"
  "$host_box" completions fish >"$gen/completions/box.fish"
  "$host_box" man >"$gen/man/man1/box.1"
  for f in "$gen"/completions/* "$gen/man/man1/box.1"; do
    [ -s "$f" ] || die "box wrote an empty $f"
  done

  rm -rf "$out"
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  local pkg_root=$target_dir/pkg
  rm -rf "$pkg_root"
  for t in "${built_box[@]}"; do
    local name=hermes-box-lite-$version-$t
    local d=$pkg_root/$name
    mkdir -p "$d"
    install -m 0755 "$target_dir/$t/release/box" "$d/box"
    if [ "$t" = aarch64-apple-darwin ]; then
      # zig's LC_UUID depends on the target dir; derive it from the binary instead.
      python3 "$repo/scripts/macho-stable-uuid.py" "$d/box" || die "cannot make $t box reproducible"
      verify_macho "$d/box"
    fi
    install -m 0755 "$hb_x86" "$d/hb-x86_64-linux"
    install -m 0755 "$hb_arm" "$d/hb-aarch64-linux"
    install -m 0644 "$src/README.md" "$src/box.env" "$d/"
    [ -d "$src/provision" ] && cp -R "$src/provision" "$d/provision"
    cp -R "$gen/completions" "$gen/man" "$d/"
    # Fixed names order, times, owners and modes; gzip without name or time stamp.
    tar --create --format=gnu --sort=name --mtime="@$sde" \
        --owner=0 --group=0 --numeric-owner --mode='u+rwX,go+rX,go-w' \
        -C "$pkg_root" "$name" | gzip -n -9 >"$out/$name.tar.gz"
  done

  # The host tarball as a user gets it: unpack, run box, find both guest helpers beside it.
  local unpack=$target_dir/unpack-check name=hermes-box-lite-$version-$host_target
  rm -rf "$unpack"
  mkdir -p "$unpack"
  tar -xzf "$out/$name.tar.gz" -C "$unpack"
  expect_version box "$version" "$commit" "$unpack/$name/box"
  cmp -s "$unpack/$name/hb-x86_64-linux" "$hb_x86" || die "$name.tar.gz: hb-x86_64-linux differs from the build"
  cmp -s "$unpack/$name/hb-aarch64-linux" "$hb_arm" || die "$name.tar.gz: hb-aarch64-linux differs from the build"
  for f in "$unpack/$name"/box "$unpack/$name"/hb-*-linux; do
    [ -x "$f" ] || die "$name.tar.gz: $(basename "$f") is not executable"
  done
  rm -rf "$unpack"

  {
    echo "hermes-box-lite $version"
    echo "commit: $rev$([ "${commit%-dirty}" != "$commit" ] && echo ' (dirty working tree)')"
    echo "SOURCE_DATE_EPOCH: $sde"
    echo "rustc: $(rustc -V)"
    echo "cargo: $(cargo -V)"
    echo "zig: $(python3 -m ziglang version)"
    echo "cargo-zigbuild: $(cargo-zigbuild -V)"
    echo "MACOSX_DEPLOYMENT_TARGET: $MACOSX_DEPLOYMENT_TARGET"
    echo "glibc floor of the Linux gnu box: $GLIBC_FLOOR"
    echo "$provision_note"
    echo
    echo "hb (profile release-hb, static musl, in every tarball):"
    echo "  hb-x86_64-linux   $(stat -c %s "$hb_x86") bytes"
    echo "  hb-aarch64-linux  $(stat -c %s "$hb_arm") bytes"
    echo "box (profile release):"
    for t in "${built_box[@]}"; do
      printf '  %-28s %s bytes\n' "$t" "$(stat -c %s "$target_dir/$t/release/box")"
    done
    for t in "${failed_box[@]}"; do
      printf '  %-28s NOT PRODUCED: did not link here (see the README, Releases)\n' "$t"
    done
  } >"$out/BUILDINFO"
  (cd "$out" && sha256sum -- BUILDINFO ./*.tar.gz | sed 's| \./| |' | LC_ALL=C sort -k2 >SHA256SUMS)

  log "dist: $out"
  (cd "$out" && ls -l -- *.tar.gz)
  sed -n '/^hb (/,$p' "$out/BUILDINFO"
}

# verify_static_elf FILE MACHINE: an ELF for MACHINE with no interpreter and no shared libs.
verify_static_elf() {
  local f=$1 machine=$2
  [ -f "$f" ] || die "missing binary $f"
  readelf -h "$f" | grep -q "Machine:.*$machine" || die "$f is not a $machine ELF: $(file -b "$f")"
  if readelf -l "$f" | grep -q 'Requesting program interpreter'; then
    die "$f asks for a dynamic loader; it must be static"
  fi
  if readelf -d "$f" 2>/dev/null | grep -q '(NEEDED)'; then
    die "$f needs shared libraries: $(readelf -d "$f" | grep NEEDED | tr -s ' ')"
  fi
}

# verify_glibc_elf FILE MACHINE: an ELF for MACHINE that needs only glibc's own libraries,
# at symbol versions no newer than GLIBC_FLOOR.
verify_glibc_elf() {
  local f=$1 machine=$2 lib newest
  [ -f "$f" ] || die "missing binary $f"
  readelf -h "$f" | grep -q "Machine:.*$machine" || die "$f is not a $machine ELF: $(file -b "$f")"
  for lib in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case "$lib" in
      libc.so.6|libm.so.6|libpthread.so.0|libdl.so.2|librt.so.1|libutil.so.1|libgcc_s.so.1|ld-linux-*.so.*) ;;
      *) die "$f needs $lib, which is not part of glibc" ;;
    esac
  done
  newest=$(readelf -W --dyn-syms "$f" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
  [ -n "$newest" ] || die "$f has no GLIBC symbol versions; is it really dynamically linked?"
  [ "$(printf '%s\n%s\n' "$newest" "$GLIBC_FLOOR" | sort -V | tail -n 1)" = "$GLIBC_FLOOR" ] \
    || die "$f needs GLIBC_$newest, newer than the floor $GLIBC_FLOOR"
}

# verify_macho FILE: an arm64 Mach-O executable with a code signature (zig signs ad hoc), the
# deployment target as its minimum macOS, and only system dylibs, no frameworks.
verify_macho() {
  local f=$1
  file -b "$f" | grep -q 'Mach-O 64-bit.*arm64' || die "$f is not an arm64 Mach-O: $(file -b "$f")"
  python3 - "$f" "$MACOSX_DEPLOYMENT_TARGET" <<'PY'
import struct, sys
path, want = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
magic, _cpu, _sub, _ftype, ncmds, _size, _flags, _res = struct.unpack_from("<IiiIIIII", data, 0)
assert magic == 0xFEEDFACF, "not a 64-bit little-endian Mach-O"
off, minos, dylibs, signed = 32, None, [], False
for _ in range(ncmds):
    cmd, size = struct.unpack_from("<II", data, off)
    if cmd == 0x1D:  # LC_CODE_SIGNATURE: arm64 macOS runs nothing without one (ad hoc is enough)
        signed = True
    elif cmd == 0x32:  # LC_BUILD_VERSION
        v = struct.unpack_from("<I", data, off + 12)[0]
        minos = f"{v >> 16}.{(v >> 8) & 0xFF}"
    elif cmd in (0xC, 0x80000018, 0x8000001F):  # LC_LOAD_DYLIB, weak, reexport
        name_off = struct.unpack_from("<I", data, off + 8)[0]
        dylibs.append(data[off + name_off: off + size].split(b"\0")[0].decode())
    off += size
print(f"    macOS arm64 Mach-O: minos {minos}, {'ad hoc signature' if signed else 'UNSIGNED'}, loads {', '.join(dylibs)}")
if not signed:
    sys.exit(f"error: {path} has no code signature; arm64 macOS would refuse to run it")
if minos is None or minos.split(".")[0] != want.split(".")[0]:
    sys.exit(f"error: {path}: minos {minos}, expected {want}")
if any(".framework/" in d for d in dylibs):
    sys.exit(f"error: {path} links an Apple framework, which this Linux build cannot check")
PY
}

# expect_version NAME VERSION COMMIT CMD…: `CMD --version` prints "NAME VERSION (COMMIT)".
expect_version() {
  local name=$1 version=$2 commit=$3
  shift 3
  local got
  got=$("$@" --version) || die "'$* --version' failed"
  [ "$got" = "$name $version ($commit)" ] \
    || die "'$* --version' printed '$got', expected '$name $version ($commit)'"
  printf '    %s\n' "$got  <- ${*: -1}"
}

# verify_no_build_paths FILE PATH…: no build-machine path survives in the binary.
verify_no_build_paths() {
  local f=$1 p
  shift
  for p in "$@"; do
    if grep -qF -- "$p/" "$f"; then
      die "$f still contains the build path $p (path remapping is incomplete)"
    fi
  done
}

# --- main -------------------------------------------------------------------------------------
need_tools
[ "$(uname -m)" = x86_64 ] || die "release builds run on x86_64 Linux (the host box writes completions)"
target_dir=${CARGO_TARGET_DIR:-$repo/target-release}
rev=$(git rev-parse --verify 'HEAD^{commit}')
src_dir=${RELEASE_SRC_DIR:-/tmp/hermes-box-lite-release/src}
mkdir -p "$(dirname "$src_dir")"
exec 9>"$(dirname "$src_dir")/.lock"
flock -n 9 || die "another release build is using $src_dir"

start=$(date +%s)
if [ "$check" -eq 0 ]; then
  build_release "$target_dir" "$out_dir"
  log "release done in $(( $(date +%s) - start )) s"
  exit 0
fi

# --check: a second, independent build (the source unpacked afresh, its own target dir, so
# nothing is reused and every cache path differs) must give the same bytes as the first.
check_dir=${target_dir}-check
log "reproducibility check: build A in $target_dir, build B from scratch in $check_dir"
rm -rf "$check_dir"   # B shares no cached artefact with A (it costs a cold build)
build_release "$target_dir" "$out_dir"
build_release "$check_dir" "$check_dir/dist"
if diff -u "$out_dir/SHA256SUMS" "$check_dir/dist/SHA256SUMS"; then
  log "reproducible: both builds produced identical SHA256SUMS"
  cat "$out_dir/SHA256SUMS"
else
  for f in "$out_dir"/*.tar.gz; do
    cmp -s "$f" "$check_dir/dist/$(basename "$f")" || warn "differs: $(basename "$f")"
  done
  die "NOT reproducible: the two builds differ (compare $target_dir/pkg with $check_dir/pkg)"
fi
log "release check done in $(( $(date +%s) - start )) s"
