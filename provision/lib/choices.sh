# shellcheck shell=bash
# Pure decisions of provisioning, sourced by provision.sh and by its tests (no side
# effects, no network): which Node.js source an image uses, what a failed step's output
# says, and how a proxy URL is shown.

# Where Node.js >= 20 comes from: `distro` when the image's own archive has it (Debian 13
# ships 20.x), `nodesource` for Ubuntu 24.04 and Debian 12, whose nodejs is 18.
# $1 = os-release ID, $2 = VERSION_ID, $3 = the archive's candidate nodejs version
# (empty when unknown).
node_plan() {
  local id=$1 version=$2 candidate=${3:-} major
  major=${candidate#*:}        # drop an epoch
  major=${major%%[.~+-]*}
  if [[ $major =~ ^[0-9]+$ ]] && [ "$major" -ge 20 ]; then
    echo distro
    return 0
  fi
  if [ -n "$candidate" ]; then
    echo nodesource
    return 0
  fi
  # No candidate known (apt lists not read yet): decide by the release.
  case $id:$version in
    debian:12|debian:11|ubuntu:2[0-4].*) echo nodesource ;;
    debian:*|ubuntu:*) echo distro ;;
    *) echo nodesource ;;
  esac
}

# True when the text on stdin shows a TLS certificate that was not trusted, as apt, curl,
# git, npm (node) and pip word it.
is_certificate_failure() {
  grep -Eqi 'self[- ]signed certificate|unable to get local issuer certificate|certificate verify failed|CERTIFICATE_VERIFY_FAILED|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT|SSL certificate problem|server certificate verification failed|certificate is not trusted|x509: certificate signed by unknown authority'
}

# A proxy URL with any user:password@ replaced by ***@, for every line we print.
redact_proxy() {
  local url=$1 scheme rest
  if [[ $url == *://* ]]; then
    scheme=${url%%://*}://
    rest=${url#*://}
  else
    scheme=""
    rest=$url
  fi
  local authority=${rest%%/*}
  if [[ $authority == *@* ]]; then
    # The last '@' of the authority ends the userinfo (a raw '@' in a password too).
    rest="***@${authority##*@}${rest#"$authority"}"
  fi
  printf '%s%s' "$scheme" "$rest"
}
