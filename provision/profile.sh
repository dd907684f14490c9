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
