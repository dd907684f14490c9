# shellcheck shell=sh
# /etc/profile.d/hermes-box.sh: installed by hermes-box provisioning; do not edit (a
# re-provision replaces it). Login shells of every user get the tool PATH; the agent also
# gets its durable config locations under /data and Executor's MCP token.

case ":${PATH}:" in
  *:/opt/hermes-box/bin:*) ;;
  *) PATH="/opt/hermes-box/bin:${PATH}" ;;
esac
export PATH
export HERMES_BOX_DATA=/data
export EDITOR=nvim VISUAL=nvim

# The host's proxies (PROPAGATE_PROXY, written by box; KEY='value' lines), and one trust for
# every tool: the system bundle holds the image's roots, the host's extra CA certificates
# (GUEST_CA_CERTS) and the box's credential CA (provisioning put both in the store); node/npm
# add the two extras (node-extra-ca.pem) to their own roots, curl, git, pip and Python read
# the bundle.
if [ -r /etc/hermes-box/proxy.env ]; then
  set -a
  # shellcheck disable=SC1091
  . /etc/hermes-box/proxy.env
  set +a
fi
if [ -s /etc/hermes-box/node-extra-ca.pem ] && [ -s /etc/ssl/certs/ca-certificates.crt ]; then
  export NODE_EXTRA_CA_CERTS=/etc/hermes-box/node-extra-ca.pem
  export SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
  export CURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
  export GIT_SSL_CAINFO=/etc/ssl/certs/ca-certificates.crt
  export PIP_CERT=/etc/ssl/certs/ca-certificates.crt
  export REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
fi

# API keys bound to hosts (CREDENTIALS): the placeholders smolvm gave this box, in the
# variables the agents read, and the bound hosts kept off the proxy (written by
# provisioning; placeholders only, never a key).
if [ -r /etc/hermes-box/credentials.env ]; then
  # shellcheck disable=SC1091
  . /etc/hermes-box/credentials.env
fi

if [ "$(id -un 2>/dev/null)" = agent ]; then
  export XDG_CONFIG_HOME=/data/home/agent/.config
  export XDG_DATA_HOME=/data/home/agent/.local/share
  export XDG_STATE_HOME=/data/home/agent/.local/state
  export XDG_CACHE_HOME=/data/home/agent/.cache
  export CLAUDE_CONFIG_DIR=/data/home/agent/.claude
  export CODEX_HOME=/data/home/agent/.codex
  export HERMES_HOME=/data/home/agent/.hermes
  # EXECUTOR_MCP_TOKEN for Codex and Hermes started from this shell (0600, written by
  # `hb wire-mcp`). Claude Code reads it through its headersHelper instead.
  if [ -r /data/home/agent/.config/hermes-box/executor-mcp.env ]; then
    # shellcheck disable=SC1091
    . /data/home/agent/.config/hermes-box/executor-mcp.env
  fi
fi
