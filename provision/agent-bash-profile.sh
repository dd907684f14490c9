# shellcheck shell=bash
# ~/.bash_profile of the agent: installed by hermes-box provisioning.
# /etc/profile (and /etc/profile.d/hermes-box.sh) has already run for this login shell.
# shellcheck disable=SC1091
[ -r "$HOME/.bashrc" ] && . "$HOME/.bashrc"
cd "$HOME/workspace" 2>/dev/null || true
# Refresh the MCP wiring if the token changed (a no-op when current; never blocks login).
# Not for `box exec`, whose login runs one command and should cost no more than it.
if [ -z "${HERMES_BOX_EXEC:-}" ] && command -v hb >/dev/null; then
  timeout 10 hb wire-mcp >/dev/null 2>&1 || true
fi
# Interactive logins land in one persistent tmux session; a login shell that runs a
# command (`bash -lc`, as box exec does, on a terminal or not) runs that command instead.
if [[ $- == *i* ]] && [ -z "${TMUX:-}" ] && [ -t 0 ] && [ -t 1 ] && command -v tmux >/dev/null; then
  exec tmux -f /opt/hermes-box/tmux.conf new-session -A -s main
fi
