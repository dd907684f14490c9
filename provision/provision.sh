#!/usr/bin/env bash
# hermes-box-lite guest provisioning. Run as root inside the box by `box new`/`repair`
# (box copies this directory in and installs /etc/hermes-box.env and /usr/local/bin/hb
# first). Safe to re-run: every step checks before it changes anything, and a run that
# changes nothing says so.
#
# Works on stock Ubuntu 24.04 (real smolvm guests), Debian 12 and Debian 13 (the
# simulator's pristine images): nothing is assumed but bash, apt and coreutils.
# Each step prints `==> step: <name>`; a failing step stops provisioning and names itself
# (no silent `set -e` exits: every command's status is checked by the step runner).
#
# Overrides (tests): HB_CONFIG (default /etc/hermes-box.env), HB_DATA (/data),
# HB_TOOL_PREFIX (/opt/hermes-box), HB_BIN (/usr/local/bin/hb), PROVISION_SKIP_APT=1,
# PROVISION_STEPS="config hermes" (run only the named steps), HERMES_INSTALLER_URL (the
# official Hermes installer's address). pip honours its own PIP_* variables (PIP_NO_INDEX,
# PIP_FIND_LINKS) in the Hermes step's PyPI fallback.
#
# Network settings box puts in before this runs (GUEST_CA_CERTS, PROPAGATE_PROXY):
# HB_CA_CERTS (/etc/hermes-box/ca-certs.pem, the host's extra CA certificates) and
# HB_PROXY_ENV (/etc/hermes-box/proxy.env, the host's proxy variables). The `network` step
# trusts the certificates before any download and exports everything for apt, curl, git,
# npm and pip; /etc/profile.d/hermes-box.sh does the same for login shells.

set -uo pipefail
umask 022
export DEBIAN_FRONTEND=noninteractive

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CONFIG=${HB_CONFIG:-/etc/hermes-box.env}
DATA=${HB_DATA:-/data}
PREFIX=${HB_TOOL_PREFIX:-/opt/hermes-box}
ASSETS=/opt/hermes-box   # tmux.conf; fixed, the agent's .bash_profile names it
HB=${HB_BIN:-/usr/local/bin/hb}
AGENT=agent
AGENT_HOME="$DATA/home/agent"
PROFILE=/etc/profile.d/hermes-box.sh
CA_CERTS=${HB_CA_CERTS:-/etc/hermes-box/ca-certs.pem}
PROXY_ENV=${HB_PROXY_ENV:-/etc/hermes-box/proxy.env}
CA_TRUSTED=/usr/local/share/ca-certificates/hermes-box.crt
MACHINE_TRUSTED=/usr/local/share/ca-certificates/hermes-box-credential-ca.crt
SYSTEM_BUNDLE=/etc/ssl/certs/ca-certificates.crt
# API keys bound to hosts (box's CREDENTIALS): smolvm gives every process of the box a
# placeholder (SMOL_PLACEHOLDER_…) in each bound variable, its credential CA at
# MACHINE_CA and a bundle (the image's roots at boot, then that CA) at SMOLVM_BUNDLE.
MACHINE_CA=/run/smol/credentials/ca.pem
SMOLVM_BUNDLE=/run/smolvm/ca-bundle.pem
CREDENTIALS_ENV=/etc/hermes-box/credentials.env
NODE_EXTRA=/etc/hermes-box/node-extra-ca.pem
# shellcheck source=lib/choices.sh
. "$HERE/lib/choices.sh"

CHANGED=()          # names of steps that changed something
CURRENT_STEP=""
STEP_LOG_FROM=1
# Everything this run prints also goes to a log, so a failed step's output can be read for
# its cause (an untrusted certificate) after the fact.
LOG=$(mktemp /tmp/hermes-box-provision.XXXXXX) || exit 1
trap 'rm -f "$LOG"' EXIT
exec > >(tee -a "$LOG") 2> >(tee -a "$LOG" >&2)

say() { printf '    %s\n' "$*"; }
changed() { CHANGED+=("$CURRENT_STEP"); say "$*"; }
die() { explain_failure; printf '==> failed: %s: %s\n' "$CURRENT_STEP" "$*" >&2; exit 1; }

# The hint for a step that failed on an untrusted certificate: the guest trusts only what
# GUEST_CA_CERTS gives it, and a TLS-inspecting network needs its CA there.
certificate_hint() {
  # shellcheck disable=SC2016  # the backticks are literal: commands for the user
  local retry='then run `box new` again (an existing box: `box repair <box>`)'
  if [ -s "$CA_CERTS" ]; then
    printf "==> failed: %s: a TLS certificate was not trusted although GUEST_CA_CERTS is set (%s certificate(s) installed): check that GUEST_CA_CERTS in box.env holds the CA that signs this network's certificates, %s\n" \
      "$CURRENT_STEP" "$(grep -c 'BEGIN CERTIFICATE' "$CA_CERTS")" "$retry" >&2
  else
    printf '==> failed: %s: a TLS certificate was not trusted (this network likely inspects TLS): set GUEST_CA_CERTS in box.env to the CA bundle your host trusts (e.g. /etc/ssl/certs/ca-certificates.crt), %s\n' \
      "$CURRENT_STEP" "$retry" >&2
  fi
}

# Names the cause of a failed step when its output shows one. The log is written by tee
# processes, so it is read once it has stopped growing (at most ~2 s).
explain_failure() {
  local size=-1 now
  for _ in $(seq 20); do
    now=$(stat -c %s "$LOG" 2>/dev/null || echo 0)
    [ "$now" = "$size" ] && break
    size=$now
    sleep 0.1
  done
  if tail -n "+$STEP_LOG_FROM" "$LOG" | is_certificate_failure; then
    certificate_hint
  fi
}

# Runs one named step; any non-zero status stops provisioning with the step's name.
step() {
  CURRENT_STEP=$1
  shift
  if [ -n "${PROVISION_STEPS:-}" ] && [[ " $PROVISION_STEPS " != *" $CURRENT_STEP "* ]]; then
    return 0
  fi
  printf '==> step: %s\n' "$CURRENT_STEP"
  STEP_LOG_FROM=$(($(wc -l < "$LOG") + 1))
  "$@"
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    explain_failure
    printf '==> failed: %s (exit %s)\n' "$CURRENT_STEP" "$rc" >&2
    exit 1
  fi
}

# --- configuration -------------------------------------------------------------------
# box.env is KEY=value lines; parsed, not sourced, and only the keys used here.
INSTALL_HERMES=1
INSTALL_EXECUTOR=1
NODE_MAJOR=22
CLAUDE_CODE_VERSION=latest
CODEX_VERSION=latest
EXECUTOR_VERSION=latest
HERMES_INSTALL_ARGS="--skip-browser --skip-computer-use"

read_config() {
  [ -r "$CONFIG" ] || { say "no $CONFIG; using defaults"; return 0; }
  local line key value
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line#"${line%%[![:space:]]*}"}
    case $line in ''|'#'*) continue ;; esac
    line=${line#export }
    key=${line%%=*}
    value=${line#*=}
    value=${value%\"}; value=${value#\"}; value=${value%\'}; value=${value#\'}
    case $key in
      INSTALL_HERMES|INSTALL_EXECUTOR|NODE_MAJOR|CLAUDE_CODE_VERSION|CODEX_VERSION|EXECUTOR_VERSION|HERMES_INSTALL_ARGS)
        printf -v "$key" '%s' "$value" ;;
    esac
  done < "$CONFIG"
  case $INSTALL_HERMES in 1|true|yes|on) INSTALL_HERMES=1 ;; *) INSTALL_HERMES=0 ;; esac
  case $INSTALL_EXECUTOR in 1|true|yes|on) INSTALL_EXECUTOR=1 ;; *) INSTALL_EXECUTOR=0 ;; esac
  say "config: INSTALL_HERMES=$INSTALL_HERMES INSTALL_EXECUTOR=$INSTALL_EXECUTOR NODE_MAJOR=$NODE_MAJOR"
}

# --- steps ---------------------------------------------------------------------------
check_system() {
  [ "$(id -u)" -eq 0 ] || die "must run as root"
  [ -r /etc/os-release ] || die "no /etc/os-release"
  # shellcheck disable=SC1091
  local id version
  id=$(. /etc/os-release && echo "${ID:-}")
  version=$(. /etc/os-release && echo "${VERSION_ID:-}")
  case $id in
    ubuntu|debian) say "$id $version" ;;
    *) die "unsupported OS '$id' (Ubuntu 24.04 or Debian 12)" ;;
  esac
}

# --- network: proxies and extra CA certificates, before any download ----------------
PROXY_KEYS=(HTTP_PROXY HTTPS_PROXY NO_PROXY ALL_PROXY http_proxy https_proxy no_proxy all_proxy)

# Reads box's proxy.env (KEY='value' lines box wrote; parsed, never sourced) and exports
# the variables; without the file, proxies are off for provisioning.
proxy_env() {
  local k
  for k in "${PROXY_KEYS[@]}"; do unset "$k"; done
  if [ ! -s "$PROXY_ENV" ]; then
    say "proxies: none"
    return 0
  fi
  local line key value shown=()
  while IFS= read -r line || [ -n "$line" ]; do
    case $line in ''|'#'*) continue ;; esac
    key=${line%%=*}
    value=${line#*=}
    value=${value#\'}; value=${value%\'}
    case " ${PROXY_KEYS[*]} " in
      *" $key "*) ;;
      *) die "$PROXY_ENV: unexpected key '${key:0:40}'" ;;
    esac
    export "$key=$value"
    case $key in [A-Z]*) shown+=("$key=$(redact_proxy "$value")") ;; esac
  done < "$PROXY_ENV"
  say "proxies: ${shown[*]}"
}

# One trust for every environment of the box (provisioning, the agent's login shells,
# `box exec`, Executor and the services hb starts, tmux): the image's roots, the host's
# extra CA certificates (GUEST_CA_CERTS: a TLS-inspecting network's CA) and the box's own
# credential CA (smolvm's, for the hosts API keys are bound to; it signs what smolvm's
# interceptor shows the box for those hosts, npm's registry when NPM_TOKEN is bound
# there). Both go into the system store, so the system bundle holds all three and every
# tool that reads it trusts them; every variable names that bundle, and node, which adds
# to its own roots, gets the two extras in NODE_EXTRA. Without them a certificate
# installed before is taken out again.
ca_trust() {
  local store_changed=0 removed=0
  sync_trusted "$CA_CERTS" "$CA_TRUSTED" "extra CA certificate(s) from GUEST_CA_CERTS" \
    "removed the extra CA certificates (GUEST_CA_CERTS is no longer set)" || return 1
  sync_trusted "$MACHINE_CA" "$MACHINE_TRUSTED" "credential CA certificate(s) of this box (smolvm's)" \
    "removed the credential CA of a box this one is not (no API keys bound here)" || return 1
  if [ "$store_changed" = 1 ] && command -v update-ca-certificates >/dev/null && [ -e "$SYSTEM_BUNDLE" ]; then
    if [ "$removed" = 1 ]; then
      update-ca-certificates --fresh >/dev/null || return 1
    else
      update-ca-certificates >/dev/null || return 1
    fi
  fi
  ca_exports || return 1
  if [ -s "$CA_CERTS" ] || [ -s "$MACHINE_CA" ]; then
    say "extra CA certificates: $(pem_count "$CA_CERTS") from GUEST_CA_CERTS, $(pem_count "$MACHINE_CA") of the box's credential CA (the system bundle: SSL_CERT_FILE, CURL_CA_BUNDLE, GIT_SSL_CAINFO, PIP_CERT, REQUESTS_CA_BUNDLE; NODE_EXTRA_CA_CERTS)"
  else
    say "extra CA certificates: none"
  fi
}

# sync_trusted SOURCE TRUSTED WHAT GONE: the store's copy follows the source (in, changed
# or out; GONE says the last).
sync_trusted() {
  local source=$1 trusted=$2 what=$3 gone=$4
  if [ ! -s "$source" ]; then
    if [ -e "$trusted" ]; then
      rm -f "$trusted" || return 1
      store_changed=1 removed=1
      changed "$gone"
    fi
    return 0
  fi
  cmp -s "$source" "$trusted" && return 0
  install -D -m 0644 "$source" "$trusted" || return 1
  store_changed=1
  changed "trusted $(grep -c 'BEGIN CERTIFICATE' "$source") $what"
}

pem_count() {
  if [ -s "$1" ]; then grep -c 'BEGIN CERTIFICATE' "$1"; else echo 0; fi
}

# The variables, for this run (the profile and hb give the same to the box's other
# environments): the system bundle once ca-certificates has built it (with both extras in
# it), the extras alone before; node gets the extras on top of its own roots.
ca_exports() {
  [ -s "$CA_CERTS" ] || [ -s "$MACHINE_CA" ] || { rm -f "$NODE_EXTRA"; return 0; }
  local tmp bundle
  tmp=$(mktemp) || return 1
  { [ ! -s "$CA_CERTS" ] || cat "$CA_CERTS"; [ ! -s "$MACHINE_CA" ] || cat "$MACHINE_CA"; } > "$tmp" || { rm -f "$tmp"; return 1; }
  cmp -s "$tmp" "$NODE_EXTRA" || install -D -m 0644 "$tmp" "$NODE_EXTRA" || { rm -f "$tmp"; return 1; }
  rm -f "$tmp"
  bundle=$NODE_EXTRA
  [ -s "$SYSTEM_BUNDLE" ] && grep -q 'BEGIN CERTIFICATE' "$SYSTEM_BUNDLE" && bundle=$SYSTEM_BUNDLE
  export NODE_EXTRA_CA_CERTS=$NODE_EXTRA
  export SSL_CERT_FILE=$bundle CURL_CA_BUNDLE=$bundle GIT_SSL_CAINFO=$bundle
  export PIP_CERT=$bundle REQUESTS_CA_BUNDLE=$bundle
}

network() {
  proxy_env || return 1
  ca_trust || return 1
  refresh_smolvm_bundle
}

# smolvm assembles SMOLVM_BUNDLE at boot from the roots the image had then: a pristine
# image has none, so until the next boot it would trust the credential CA alone and every
# other HTTPS host would fail. Assemble it again from what is trusted now (smolvm's agent
# does the same at every boot; /run is a tmpfs).
refresh_smolvm_bundle() {
  [ -s "$MACHINE_CA" ] || return 0
  local b
  b=$(mktemp) || return 1
  if [ -s "$SYSTEM_BUNDLE" ]; then cat "$SYSTEM_BUNDLE" >> "$b"; elif [ -s "$CA_CERTS" ]; then cat "$CA_CERTS" >> "$b"; fi
  cat "$MACHINE_CA" >> "$b"
  if ! cmp -s "$b" "$SMOLVM_BUNDLE"; then
    if ! { mkdir -p "$(dirname "$SMOLVM_BUNDLE")" && install -m 0644 "$b" "$SMOLVM_BUNDLE"; }; then
      rm -f "$b"
      return 1
    fi
    say "smolvm's CA bundle now holds the trusted roots and the box's credential CA"
  fi
  rm -f "$b"
}

# The placeholders smolvm put in this box's environment, for the agent's login shells
# (which start from a clean environment), with the trust variables that make the
# credential CA trusted there: /etc/hermes-box/credentials.env, sourced by the profile.
# The variables are the ones smolvm set to a placeholder (box checked each binding took).
credentials_env() {
  local vars v val tmp
  vars=$(env | sed -n 's/^\([A-Za-z_][A-Za-z0-9_]*\)=SMOL_PLACEHOLDER_[A-Za-z0-9_]*$/\1/p' | sort | paste -sd' ' -)
  if [ -z "$vars" ]; then
    if [ -e "$CREDENTIALS_ENV" ]; then
      rm -f "$CREDENTIALS_ENV" || return 1
      changed "no API keys bound any more: removed $CREDENTIALS_ENV"
    else
      say "API keys bound to hosts: none"
    fi
    return 0
  fi
  [ -s "$MACHINE_CA" ] || die "smolvm put no credential CA at $MACHINE_CA although this box binds API keys ($vars): the installed smolvm did not apply --credential"
  refresh_smolvm_bundle || return 1
  tmp=$(mktemp) || return 1
  for v in $vars; do
    val=${!v:-}
    case $val in
      SMOL_PLACEHOLDER_*) printf "export %s='%s'\n" "$v" "$val" >> "$tmp" ;;
    esac
  done
  # The trust variables are the profile's (the system bundle holds the credential CA); Deno
  # reads its own.
  printf 'export DENO_CERT=%s\n' "$SYSTEM_BUNDLE" >> "$tmp"
  # The bound hosts, as smolvm name-constrained its CA to them: never through a proxy
  # (PROPAGATE_PROXY), or smolvm sees a flow to the proxy, not HTTPS to the host, and the
  # key is never put in.
  local hosts
  hosts=$(openssl x509 -in "$MACHINE_CA" -noout -ext nameConstraints 2>/dev/null |
    grep -o 'DNS:[^, ]*' | cut -d: -f2 | sort -u | paste -sd, -)
  if [ -n "$hosts" ]; then
    # shellcheck disable=SC2016 # expanded by the login shell that sources the file
    printf 'export NO_PROXY="${NO_PROXY:+$NO_PROXY,}%s" no_proxy="${no_proxy:+$no_proxy,}%s"\n' \
      "$hosts" "$hosts" >> "$tmp"
  fi
  if cmp -s "$tmp" "$CREDENTIALS_ENV"; then
    say "API keys bound to hosts: $vars (placeholders current)"
  else
    install -D -m 0644 "$tmp" "$CREDENTIALS_ENV" || { rm -f "$tmp"; return 1; }
    changed "placeholders for $vars in the login environment"
  fi
  rm -f "$tmp"
}

APT_PACKAGES=(ca-certificates curl git jq tmux sudo neovim build-essential xz-utils
  less procps iproute2 util-linux ripgrep unzip python3 python3-venv)

apt_packages() {
  if [ "${PROVISION_SKIP_APT:-0}" = 1 ]; then
    say "PROVISION_SKIP_APT=1: not touching apt"
    return 0
  fi
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "all ${#APT_PACKAGES[@]} packages present"
    return 0
  fi
  say "installing: ${missing[*]}"
  apt-get update -qq || return 1
  apt-get install -y -qq --no-install-recommends "${missing[@]}" || return 1
  apt-get clean
  changed "installed ${#missing[@]} packages"
  # ca-certificates arrived: its bundle (with GUEST_CA_CERTS in it) serves curl, git, pip.
  ca_exports
  refresh_smolvm_bundle
}

agent_user() {
  if ! getent passwd "$AGENT" >/dev/null; then
    useradd --home-dir "$AGENT_HOME" --no-create-home --shell /bin/bash --user-group "$AGENT" || return 1
    changed "created user $AGENT"
  fi
  local home shell
  home=$(getent passwd "$AGENT" | cut -d: -f6)
  shell=$(getent passwd "$AGENT" | cut -d: -f7)
  if [ "$home" != "$AGENT_HOME" ] || [ "$shell" != /bin/bash ]; then
    usermod --home "$AGENT_HOME" --shell /bin/bash "$AGENT" || return 1
    changed "set $AGENT's home to $AGENT_HOME"
  fi
  local sudoers=/etc/sudoers.d/$AGENT want="$AGENT ALL=(ALL) NOPASSWD:ALL"
  if [ "$(cat "$sudoers" 2>/dev/null)" != "$want" ]; then
    mkdir -p /etc/sudoers.d
    printf '%s\n' "$want" > "$sudoers.tmp" && chmod 0440 "$sudoers.tmp" || return 1
    if command -v visudo >/dev/null && ! visudo -cqf "$sudoers.tmp"; then
      rm -f "$sudoers.tmp"; die "visudo rejected $sudoers"
    fi
    mv -f "$sudoers.tmp" "$sudoers" || return 1
    changed "passwordless sudo for $AGENT"
  fi
  [ "$(stat -c %a "$sudoers")" = 440 ] || { chmod 0440 "$sudoers" && changed "fixed $sudoers mode"; }
  say "user $AGENT ($(id -u "$AGENT")), home $AGENT_HOME"
}

node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

# npm from its own registry tarball, which then installs itself under /usr/local the
# ordinary way. Pinned: npm's latest (12.x) needs Node 22.22+, 10.9 runs on Node >= 20.5.
NPM_BOOTSTRAP_VERSION=10.9.4
npm_bootstrap() {
  local meta url dir
  meta=$(curl -fsSL --max-time 60 "https://registry.npmjs.org/npm/$NPM_BOOTSTRAP_VERSION") || return 1
  url=$(printf '%s' "$meta" | jq -r '.dist.tarball // empty')
  [ -n "$url" ] || die "the npm registry's answer for npm@$NPM_BOOTSTRAP_VERSION has no tarball"
  dir=$(mktemp -d /tmp/npm-bootstrap.XXXXXX) || return 1
  # From the tarball, not the unpacked folder: a folder install is only a symlink to it.
  if ! { curl -fsSL --max-time 120 "$url" -o "$dir/npm.tgz" && tar -xzf "$dir/npm.tgz" -C "$dir" \
    && node "$dir/package/bin/npm-cli.js" install -g --prefix /usr/local --no-audit --no-fund --loglevel=error "$dir/npm.tgz"; }; then
    rm -rf "$dir"
    return 1
  fi
  rm -rf "$dir"
  hash -r
}

nodejs() {
  if command -v node >/dev/null && [ "$(node_major)" -ge 20 ] && command -v npm >/dev/null; then
    say "node $(node --version), npm $(npm --version)"
    return 0
  fi
  if [ "${PROVISION_SKIP_APT:-0}" = 1 ]; then
    die "Node.js >= 20 with npm is required (found: $(node --version 2>/dev/null || echo none)) and PROVISION_SKIP_APT=1 forbids installing it"
  fi
  local id version candidate plan
  id=$(. /etc/os-release && echo "${ID:-}")
  version=$(. /etc/os-release && echo "${VERSION_ID:-}")
  apt-get update -qq || return 1
  candidate=$(apt-cache policy nodejs 2>/dev/null | sed -n 's/^ *Candidate: *//p' | grep -v '(none)')
  plan=$(node_plan "$id" "$version" "$candidate")
  say "nodejs: $plan (archive candidate: ${candidate:-none})"
  case $plan in
    distro)
      # Debian 13's own nodejs (20.x). Not Debian's npm package: it drags in ~340 node-*
      # packages and took 5 minutes here; npm comes from the npm registry instead.
      apt-get install -y -qq --no-install-recommends nodejs || return 1
      apt-get clean
      command -v npm >/dev/null || npm_bootstrap || return 1
      ;;
    nodesource)
      # Ubuntu 24.04 and Debian 12 ship Node 18: NodeSource's NODE_MAJOR line instead.
      local setup=/tmp/nodesource_setup.sh
      curl -fsSL --max-time 60 "https://deb.nodesource.com/setup_${NODE_MAJOR}.x" -o "$setup" \
        || die "cannot download NodeSource's setup script for Node ${NODE_MAJOR} (https://deb.nodesource.com); this image's own nodejs is ${candidate:-missing}, too old"
      bash "$setup" >/dev/null || { rm -f "$setup"; return 1; }
      rm -f "$setup"
      apt-get install -y -qq nodejs || return 1
      apt-get clean
      ;;
  esac
  if command -v node >/dev/null && [ "$(node_major)" -ge 20 ] && command -v npm >/dev/null; then
    changed "node $(node --version) ($plan), npm $(npm --version)"
    return 0
  fi
  die "Node.js >= 20 with npm is required; after installing from $plan: node $(node --version 2>/dev/null || echo missing), npm $(npm --version 2>/dev/null || echo missing)"
}

# Installs one npm package under $PREFIX unless the wanted version is already there.
npm_tool() {
  local pkg=$1 spec=$2 dir installed
  dir="$PREFIX/lib/node_modules/$pkg"
  installed=$(node -p "require('$dir/package.json').version" 2>/dev/null || true)
  if [ -n "$installed" ] && { [ "$spec" = latest ] || [ "$spec" = "$installed" ]; }; then
    say "$pkg $installed"
    return 0
  fi
  say "npm install $pkg@$spec"
  npm install -g --prefix "$PREFIX" --no-audit --no-fund --loglevel=error "$pkg@$spec" || return 1
  changed "$pkg $(node -p "require('$dir/package.json').version" 2>/dev/null)"
}

npm_tools() {
  mkdir -p "$PREFIX/bin" "$PREFIX/lib" || return 1
  npm_tool @anthropic-ai/claude-code "$CLAUDE_CODE_VERSION" || return 1
  npm_tool @openai/codex "$CODEX_VERSION" || return 1
  if [ "$INSTALL_EXECUTOR" = 1 ]; then
    npm_tool executor "$EXECUTOR_VERSION" || return 1
  else
    say "executor: skipped (INSTALL_EXECUTOR=0)"
  fi
  npm cache clean --force >/dev/null 2>&1 || true
}

# Not named `hermes`: `command -v hermes` would find the function and never install.
hermes_agent() {
  if [ "$INSTALL_HERMES" != 1 ]; then
    say "skipped (INSTALL_HERMES=0)"
    return 0
  fi
  if [ -x "$PREFIX/bin/hermes" ] || type -P hermes >/dev/null; then
    say "hermes present"
    return 0
  fi
  local hermes_home="$AGENT_HOME/.hermes" installer
  local installer_url=${HERMES_INSTALLER_URL:-https://hermes-agent.nousresearch.com/install.sh}
  mkdir -p "$hermes_home" "$PREFIX/bin" || return 1
  # A name of its own: two provisionings on one machine (tests) must not share the file.
  installer=$(mktemp /tmp/hermes-install.XXXXXX) || return 1
  # The official headless installer where it is reachable; it reads prompts from a pipe
  # (EOF), so it stays non-interactive.
  if curl -fsSL --max-time 20 "$installer_url" -o "$installer" 2>/dev/null; then
    # shellcheck disable=SC2086
    if HERMES_HOME="$hermes_home" bash "$installer" $HERMES_INSTALL_ARGS --skip-setup --non-interactive </dev/null; then
      rm -f "$installer"
      local bin
      for bin in "$(type -P hermes)" /usr/local/bin/hermes /root/.local/bin/hermes; do
        [ -x "$bin" ] && break
      done
      [ -x "$bin" ] && ln -sfn "$bin" "$PREFIX/bin/hermes"
      changed "hermes from the official installer"
      return 0
    fi
    say "official installer failed; falling back to PyPI"
  else
    say "official installer unreachable; using PyPI hermes-agent"
  fi
  rm -f "$installer"
  # The `mcp` extra is Hermes's MCP client: without it Hermes cannot reach Executor.
  python3 -m venv "$PREFIX/hermes-venv" || return 1
  "$PREFIX/hermes-venv/bin/pip" install --quiet --disable-pip-version-check 'hermes-agent[mcp]' || return 1
  ln -sfn "$PREFIX/hermes-venv/bin/hermes" "$PREFIX/bin/hermes" || return 1
  changed "hermes-agent $("$PREFIX/hermes-venv/bin/pip" show hermes-agent 2>/dev/null | sed -n 's/^Version: //p') from PyPI"
}

hb_binary() {
  [ -x "$HB" ] || die "$HB is missing; box installs it before provisioning (re-run \`box repair <box>\`)"
  "$HB" --version >/dev/null || die "$HB does not run on this machine ($(uname -m)); re-run \`box repair <box>\`"
  say "$("$HB" --version)"
}

hb_init() {
  local out
  out=$(HB_DATA="$DATA" HB_AGENT_USER="$AGENT" "$HB" init) || return 1
  say "$out"
}

# Installs a file from this directory when it differs; $4 = owner (default root).
place() {
  local src=$HERE/$1 dst=$2 mode=$3 owner=${4:-root}
  [ -r "$src" ] || die "missing $src"
  if cmp -s "$src" "$dst" && [ "$(stat -c %a "$dst")" = "${mode#0}" ] && [ "$(stat -c %U "$dst")" = "$owner" ]; then
    say "$dst current"
    return 0
  fi
  install -D -m "$mode" -o "$owner" -g "$owner" "$src" "$dst" || return 1
  changed "installed $dst"
}

login_env() {
  place profile.sh "$PROFILE" 0644 || return 1
  # Proxy URLs may hold credentials: root and the agent's login shells read them, no one
  # else (box copies the file in root-only).
  if [ -e "$PROXY_ENV" ] && [ "$(stat -c %a:%U:%G "$PROXY_ENV")" != "640:root:$AGENT" ]; then
    chown "root:$AGENT" "$PROXY_ENV" && chmod 0640 "$PROXY_ENV" || return 1
    say "$PROXY_ENV readable by $AGENT"
  fi
  place tmux.conf "$ASSETS/tmux.conf" 0644 || return 1
  place agent-bash-profile.sh "$AGENT_HOME/.bash_profile" 0644 "$AGENT" || return 1
}

verify() {
  local missing=() t
  local tools=(node npm git tmux jq curl nvim sudo)
  local prefixed=(claude codex)
  [ "$INSTALL_EXECUTOR" = 1 ] && prefixed+=(executor)
  [ "$INSTALL_HERMES" = 1 ] && prefixed+=(hermes)
  # type -P: a program on PATH, never a function of this script.
  for t in "${tools[@]}"; do type -P "$t" >/dev/null || missing+=("$t"); done
  for t in "${prefixed[@]}"; do [ -x "$PREFIX/bin/$t" ] || type -P "$t" >/dev/null || missing+=("$t"); done
  [ ${#missing[@]} -eq 0 ] || die "missing after provisioning: ${missing[*]}"
  say "all tools present"
}

manifest() {
  if [ ${#CHANGED[@]} -eq 0 ] && [ -s "$AGENT_HOME/.config/hermes-box/runtime-manifest" ]; then
    say "runtime manifest current"
    return 0
  fi
  PATH="$PREFIX/bin:$PATH" HB_DATA="$DATA" HB_AGENT_USER="$AGENT" "$HB" write-manifest >/dev/null || return 1
  changed "runtime manifest written"
}

step config read_config
step system check_system
step network network
step apt-packages apt_packages
step agent-user agent_user
step nodejs nodejs
step npm-tools npm_tools
step hermes hermes_agent
step hb-binary hb_binary
step hb-init hb_init
step login-environment login_env
step credentials credentials_env
step verify verify
step runtime-manifest manifest

if [ ${#CHANGED[@]} -eq 0 ]; then
  printf '==> provisioning: already provisioned, nothing changed\n'
else
  printf '==> provisioning complete; changed: %s\n' "$(printf '%s\n' "${CHANGED[@]}" | uniq | paste -sd, -)"
fi
