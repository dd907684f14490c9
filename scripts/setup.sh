#!/usr/bin/env bash
# Installs what building and testing hermes-box-lite needs on Debian 12 (run as root, or
# with sudo available). Idempotent: a second run changes nothing.
set -euo pipefail

log() { printf '==> %s\n' "$*"; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

apt_packages=(
  gnupg tar gzip zstd python3 git curl ca-certificates jq
  iproute2 util-linux slirp4netns procps psmisc
  tmux sudo sqlite3
)

missing=()
for p in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "apt-get install ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  log "Debian packages: all present"
fi

if ! command -v just >/dev/null 2>&1; then
  log "pip install rust-just (the 'just' command runner)"
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore rust-just
  command -v pyenv >/dev/null 2>&1 && pyenv rehash || true
fi

log "setup complete"
