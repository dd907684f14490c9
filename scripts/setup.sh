#!/usr/bin/env bash
# Installs what building and testing hermes-box-lite needs on Debian 12 (run as root, or
# with sudo available). Idempotent: a second run changes nothing.
set -euo pipefail

log() { printf '==> %s\n' "$*"; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# apt_ensure WHY PKG...: installs the Debian packages of the list that are missing (one
# apt-get update, only when something is), and says which or that all were present.
apt_ensure() {
  local why=$1 p
  shift
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get install ${missing[*]} ($why)"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    log "$why: Debian packages all present"
  fi
}

# `--release` adds the cross toolchain `just release` and CI's aarch64 check need (see the
# release section at the end); without it this script stays cheap, as CI runs it every time.
with_release=0
for arg in "$@"; do
  case "$arg" in
    --release) with_release=1 ;;
    *) echo "usage: scripts/setup.sh [--release]" >&2; exit 2 ;;
  esac
done

apt_packages=(
  gnupg tar gzip zstd python3 git curl ca-certificates jq
  iproute2 util-linux slirp4netns procps psmisc
  tmux sudo sqlite3
  dbus-daemon gnome-keyring
)

apt_ensure "build and tests" "${apt_packages[@]}"

# `just`, the command runner: PyPI's rust-just wheel (seconds); where pip refuses to touch
# a distribution's Python (PEP 668, Debian's own python3), crates.io's just (a minute).
if ! command -v just >/dev/null 2>&1; then
  log "pip install rust-just (the 'just' command runner)"
  if python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore rust-just; then
    if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi
  else
    log "pip could not install it; cargo install just instead"
    cargo install --locked --quiet just
  fi
  command -v just >/dev/null 2>&1 ||
    log "WARNING: just is installed but not on PATH; add ~/.local/bin or ~/.cargo/bin to PATH"
fi

# --- release (issue 8) ---
# Cross-building `hb` and `box` (scripts/release.sh, scripts/ci-aarch64.sh). zstd-sys and the
# bundled SQLite compile C, so the Linux musl and macOS targets link with zig through
# cargo-zigbuild (zig ships musl and macOS libc headers for every target). Versions are pinned:
# a release is reproducible for the same commit *and* toolchain. Each step runs only when its
# tool is missing or at another version.
if [ "$with_release" -eq 1 ]; then
  release_zig_version=0.17.1
  release_zigbuild_version=0.24.1
  release_targets=(x86_64-unknown-linux-musl aarch64-unknown-linux-musl aarch64-unknown-linux-gnu
                   aarch64-apple-darwin)
  # libc6-arm64-cross: the aarch64 glibc qemu needs to run the aarch64 Linux box here.
  release_apt=(qemu-user-static libc6-arm64-cross binutils file)

  apt_ensure release "${release_apt[@]}"

  installed_targets=$(rustup target list --installed)
  for t in "${release_targets[@]}"; do
    if ! grep -qx "$t" <<<"$installed_targets"; then
      log "rustup target add $t"
      rustup target add "$t"
    fi
  done

  if [ "$(python3 -m ziglang version 2>/dev/null || true)" != "$release_zig_version" ]; then
    log "pip install ziglang==$release_zig_version (zig, the C compiler and linker for cross targets)"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
      "ziglang==$release_zig_version"
  fi

  if [ "$(cargo-zigbuild -V 2>/dev/null || true)" != "cargo-zigbuild $release_zigbuild_version" ]; then
    log "cargo install cargo-zigbuild $release_zigbuild_version"
    cargo install --locked --quiet cargo-zigbuild --version "$release_zigbuild_version"
  fi
  log "release toolchain: zig $release_zig_version, cargo-zigbuild $release_zigbuild_version, targets ${release_targets[*]}"
fi

# --- hb / agents (issue 4) ---
# The real Executor, Codex and Claude Code that hb's tests drive (crates/hb-guest/tests),
# under their own npm prefix so they never shadow anything: ~900 MB, ~15 s with a warm
# npm cache. Versions pinned to what the tests were written against (the registry here
# serves executor 1.5.9 only). shellcheck checks provision/*.sh in hb's tests.
hb_tools_prefix=/opt/hermes-box-ci
hb_npm_pkgs=(executor@1.5.9 @openai/codex@0.171.0 @anthropic-ai/claude-code@2.1.197)
apt_ensure "hb's script checks" shellcheck
if ! command -v node >/dev/null 2>&1 || [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  log "WARNING: Node.js >= 20 is missing; hb's real-Executor tests will fail under CI=true"
else
  hb_tools_ok=1
  for t in executor codex claude; do [ -x "$hb_tools_prefix/bin/$t" ] || hb_tools_ok=0; done
  [ "$hb_tools_ok" = 1 ] && ! "$hb_tools_prefix/bin/executor" --version 2>/dev/null | grep -q 'v1.5.9' && hb_tools_ok=0
  if [ "$hb_tools_ok" = 1 ]; then
    log "hb test tools: executor, codex, claude present in $hb_tools_prefix"
  else
    log "npm install ${hb_npm_pkgs[*]} into $hb_tools_prefix"
    as_root npm install -g --prefix "$hb_tools_prefix" --no-audit --no-fund --loglevel=error "${hb_npm_pkgs[@]}"
  fi
fi
# --- end hb / agents (issue 4) ---

# --- hermes (real Hermes Agent for hb's tests) ---
# The real Hermes Agent that hb's tests ask to read and test the MCP wiring hb writes
# (crates/hb-guest/tests/hermes_real.rs), pinned, with the `mcp` extra (Hermes's MCP
# client), in a venv beside the npm tools. Debian's python3, not a pyenv shim, so the venv
# does not depend on a user's home. The wheels stay in hermes-wheels: provision.sh's PyPI
# fallback is tested from them offline. ~270 MB (venv 235, wheels 40), ~25 s from PyPI.
hermes_version=0.19.0
hermes_spec="hermes-agent[mcp]==$hermes_version"
hermes_venv=$hb_tools_prefix/hermes-venv
hermes_wheels=$hb_tools_prefix/hermes-wheels
apt_ensure "Hermes Agent's venv" python3-venv
hermes_have=$("$hermes_venv/bin/python" -c 'import importlib.metadata as m; print(m.version("hermes-agent"), m.version("mcp"))' 2>/dev/null || true)
if [ "${hermes_have%% *}" = "$hermes_version" ] && [ -x "$hb_tools_prefix/bin/hermes" ] &&
   compgen -G "$hermes_wheels/hermes_agent-$hermes_version-*.whl" >/dev/null; then
  log "hermes-agent $hermes_version present in $hermes_venv"
else
  log "pip install $hermes_spec into $hermes_venv (wheels kept in $hermes_wheels)"
  as_root /usr/bin/python3 -m venv "$hermes_venv"
  as_root "$hermes_venv/bin/pip" download --quiet --disable-pip-version-check --only-binary=:all: \
    -d "$hermes_wheels" "$hermes_spec"
  as_root "$hermes_venv/bin/pip" install --quiet --disable-pip-version-check --no-index \
    --find-links "$hermes_wheels" "$hermes_spec"
  as_root mkdir -p "$hb_tools_prefix/bin"
  as_root ln -sfn ../hermes-venv/bin/hermes "$hb_tools_prefix/bin/hermes"
fi
# --- end hermes ---

# --- host lifecycle (issue 5) ---
# The lifecycle tests (crates/box-host/tests/lifecycle*.rs) provision for real inside
# simulator guests, which see this host's userland: with provision.sh's apt packages
# already here, its apt step finds nothing to install and needs no network. The npm tools
# it needs come from hb's section above (/opt/hermes-box-ci, pinned versions).
lifecycle_apt=(ca-certificates curl git jq tmux sudo neovim build-essential xz-utils
  less procps iproute2 util-linux ripgrep unzip python3 python3-venv)
apt_ensure "provision.sh's packages, for the lifecycle tests" "${lifecycle_apt[@]}"
# Simulator guests get a private, empty /opt (like a stock image) but overlay /var from the
# host, so the lifecycle tests and the demo reach hb's pinned npm tools through a
# hard-linked copy under /var (no extra disk; a plain copy where links cannot be made).
# Hermes's venv stays out of it: its scripts' shebangs name /opt/hermes-box-ci, which guests
# do not see, and the lifecycle tests provision with INSTALL_HERMES=0.
lifecycle_tools=/var/lib/hermes-box-lifecycle-tools
if [ -x /opt/hermes-box-ci/bin/executor ]; then
  lifecycle_stamp=$(cd /opt/hermes-box-ci && find . -name package.json -path '*/node_modules/*' -maxdepth 4 -exec md5sum {} + 2>/dev/null | sort | md5sum)
  if [ "$(cat "$lifecycle_tools/.stamp" 2>/dev/null)" != "$lifecycle_stamp" ]; then
    log "linking /opt/hermes-box-ci into $lifecycle_tools (for simulator guests)"
    as_root rm -rf "$lifecycle_tools"
    as_root cp -al /opt/hermes-box-ci "$lifecycle_tools" 2>/dev/null || as_root cp -a /opt/hermes-box-ci "$lifecycle_tools"
    as_root rm -rf "$lifecycle_tools/hermes-venv" "$lifecycle_tools/hermes-wheels" "$lifecycle_tools/bin/hermes"
    printf '%s\n' "$lifecycle_stamp" | as_root tee "$lifecycle_tools/.stamp" >/dev/null
  else
    log "lifecycle test tools: $lifecycle_tools up to date"
  fi
else
  log "WARNING: /opt/hermes-box-ci has no executor; the lifecycle tests will fail under CI=true"
fi
# --- end host lifecycle (issue 5) ---

# --- save/load (issue 6) ---
# The save/load tests need gnupg, tar, sqlite3, git and python3 (the base list above) on the
# host and, through the simulator's /usr overlay, inside guests; the npm tools reach guests
# through the lifecycle section's /var/lib/hermes-box-lifecycle-tools. GNU time is only for
# the benchmark: cargo test -p box-host --release --test save_load_bench -- --ignored --nocapture
apt_ensure "GNU time, for the save/load benchmark" time
# --- end save/load (issue 6) ---

# --- simulator images (issue 11) ---
# smolvm-sim guests boot pristine images built from the Debian archive (minbase, as the OCI
# debian images are): debian:12 and debian:13, the stand-in for ubuntu:24.04/26.04. The
# recipe is the simulator's own (crates/smolvm-sim/src/image/build-image.sh); it builds into
# a temp dir, renames into /var/cache/smolvm-sim/images (SMOLVM_SIM_IMAGES overrides) under
# a flock, and does nothing for an image already there. Cold: ~45-65 s and ~130-180 MiB each.
apt_ensure "smolvm-sim images" mmdebstrap debian-archive-keyring
sim_images=${SMOLVM_SIM_IMAGES:-/var/cache/smolvm-sim/images}
for sim_image in debian:12 debian:13; do
  if [ -d "$sim_images/${sim_image//:/_}/rootfs" ]; then
    log "smolvm-sim image $sim_image: cached in $sim_images"
  else
    log "building smolvm-sim image $sim_image into $sim_images (mmdebstrap, about a minute)"
    as_root bash "$(dirname "$0")/../crates/smolvm-sim/src/image/build-image.sh" "$sim_images" "$sim_image" |
      sed -n 's/^progress 100 /    /p'
  fi
done
# --- end simulator images (issue 11) ---

# --- archives from the wild (issue 13) ---
# tests/ext_archives.rs needs GNU tar, gnupg, util-linux (setpriv) and python3 (fuzz seeds)
# from the base list, and the corpus beside the repo root, which is other projects' data
# and never copied into it: under CI=true the test fails without it.
if [[ ! -f "$(dirname "$0")/../../shared/ext-archives/SOURCES.txt" ]]; then
  log "WARNING: ../shared/ext-archives is missing; tests/ext_archives.rs will fail under CI=true"
fi
# --- end archives from the wild (issue 13) ---

# --- gpg 2.4 (issue 21) ---
# Backups from users' newer gpg: tests/backup_interop.rs writes seed-style backups with
# Debian 13's GnuPG 2.4 (AEAD/OCB, its defaults) from a small trixie chroot (~110 MiB,
# ~15 s cold; mmdebstrap is installed by the simulator images' section above).
as_root bash "$(dirname "$0")/gpg24-chroot.sh" /var/cache/hermes-box-tests/gpg24 | sed 's/^/    /'
# --- end gpg 2.4 (issue 21) ---

# --- remote hosts (issue 24) ---
# tests/remote*.rs run a real OpenSSH server per connection (`sshd -i` as ssh's
# ProxyCommand, inside a network namespace the test makes): nothing may listen on this host.
# Debian's postinst starts and enables ssh.service: a policy-rc.d that answers 101 ("action
# forbidden") keeps it from starting during the install (only ours, only when none is there:
# a Docker image ships its own), and sshd_not_to_be_run keeps the unit from ever starting
# (Debian's ssh.service and ssh.socket honour it). A host that already had openssh-server
# (someone logs in over it) is left alone.
if ! dpkg-query -W -f='${Status}' openssh-server 2>/dev/null | grep -q 'install ok installed'; then
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee /usr/sbin/policy-rc.d >/dev/null
    as_root chmod 755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  as_root mkdir -p /etc/ssh
  as_root touch /etc/ssh/sshd_not_to_be_run
  ssh_ok=0
  apt_ensure "remote-host tests (sshd -i only, never a listening service)" openssh-server && ssh_ok=1
  if [ "$own_policy" = 1 ]; then as_root rm -f /usr/sbin/policy-rc.d; fi
  [ "$ssh_ok" = 1 ] || { log "apt-get install openssh-server failed"; exit 1; }
  log "ssh.service stays off (/etc/ssh/sshd_not_to_be_run; remove it to run an sshd here)"
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    as_root systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true
  fi
else
  log "remote-host tests: openssh-server present"
fi
# --- end remote hosts (issue 24) ---

# --- box open gateway (issue 12) ---
# A real browser for `box open`: the gateway tests (crates/box-host/tests/open_gateway.rs)
# load the one-time sign-in URL in headless Chromium against the real Executor 1.5.9 and
# read the DOM Executor's SPA built.
apt_ensure "box open's browser test" chromium
# --- end box open gateway (issue 12) ---

log "setup complete"
