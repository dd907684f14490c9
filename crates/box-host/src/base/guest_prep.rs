//! What runs inside a guest around a base: the steps of `provision.sh` that belong to a
//! base and to a box, the preparation before packing (nothing per box, nothing secret,
//! what the 1.0.4 ownership quirk will need), and the repair of that quirk at a new box's
//! first boot.

/// provision.sh steps a base runs: everything but what makes a box someone's (`hb init`
/// creates the data layout and the agent's state, the login environment and the runtime
/// manifest live in the agent's home under /data).
pub const BASE_STEPS: &str =
    "config system network apt-packages agent-user nodejs npm-tools hermes hb-binary verify";

/// provision.sh steps a box made from a base runs: its own configuration, network (its CA
/// and proxies), `hb init`, the login environment and the runtime manifest. The installed
/// tools came with the base; `verify` proves they still run.
pub const PER_BOX_STEPS: &str =
    "config system network hb-binary hb-init login-environment credentials verify runtime-manifest";

/// The workload a base's pack declares (`pack create --entrypoint`). smolvm puts the
/// pack's entrypoint in front of the source machine's cmd (`/bin/sh -c <launcher>`), so
/// the entrypoint must be a program that ignores its arguments: this script, written into
/// the base before it is packed.
pub const BASE_WORKLOAD: &str = "/usr/local/libexec/hermes-box/base-workload";

/// A root-owned file every base has: how a new box tells whether smolvm gave root's files
/// back to someone else (1.0.4).
const MARKER: &str = "/var/lib/hermes-box/base-marker";
const SETID: &str = "/var/lib/hermes-box/base-setid";
const OWNERS: &str = "/var/lib/hermes-box/base-owners";

/// Paths no `find` over the guest's tree should walk.
const PRUNE: &str =
    r"\( -path /proc -o -path /sys -o -path /dev -o -path /run -o -path /tmp \) -prune -o";

/// Prepares a provisioned builder for packing, as root. Exit 3 and a list on stdout when
/// /data holds anything beyond the empty layout (a base never carries user state).
pub fn prepare_script() -> String {
    format!(
        r#"set -u
# Proxy settings (they may hold credentials) are per box: never in a base. Nor is a
# machine's credential CA (a builder binds no keys, but a base must never trust one).
rm -f /etc/hermes-box/proxy.env /etc/hermes-box/credentials.env
if [ -e /usr/local/share/ca-certificates/hermes-box-credential-ca.crt ]; then
  rm -f /usr/local/share/ca-certificates/hermes-box-credential-ca.crt
  update-ca-certificates --fresh >/dev/null 2>&1
fi
mkdir -p /usr/local/libexec/hermes-box /var/lib/hermes-box || exit 1
printf '%s\n' '#!/bin/sh' '# hermes-box base workload: waits for hb, then becomes it (arguments ignored).' \
  'while [ ! -x /usr/local/bin/hb ]; do sleep 1; done' 'exec /usr/local/bin/hb workload' > {BASE_WORKLOAD} || exit 1
chmod 0755 {BASE_WORKLOAD} || exit 1
: > {MARKER} && chown 0:0 {MARKER} || exit 1
find / {PRUNE} -type f -perm /6000 -printf '%m %p\n' > {SETID} || exit 1
find / {PRUNE} \( ! -uid 0 -o ! -gid 0 \) -printf '%U:%G %p\n' > {OWNERS} || exit 1
# The builder's own logs (its workload writes /data/logs) are not a box's.
find /data/logs -mindepth 1 ! -type d -delete 2>/dev/null
# /data may hold only directories and the agent's untouched /etc/skel files.
bad=0
if [ -d /data ]; then
  home=/data/home/agent
  while IFS= read -r -d '' p; do
    rel=${{p#"$home"/}}
    if [ "$rel" != "$p" ] && [ -f "/etc/skel/$rel" ] && cmp -s "$p" "/etc/skel/$rel"; then
      continue
    fi
    echo "user state in the base: $p"
    bad=1
  done < <(find /data -mindepth 1 ! -type d -print0)
fi
rm -rf /tmp/hermes-box-provision.* /root/.npm/_cacache /root/.cache/pip 2>/dev/null
# apt's package lists (~90 MiB) go stale with the base and every box would carry and
# extract them: a box runs `apt-get update` before installing, as in a stock image.
find /var/lib/apt/lists -mindepth 1 -maxdepth 1 ! -name partial ! -name lock -exec rm -rf {{}} + 2>/dev/null
apt-get clean 2>/dev/null
[ "$bad" = 0 ] || exit 3
# Not even the empty layout: a box's `hb init` makes it in the box's own upper layer. In a
# box from a base the pack's files are read-only lower layers (smolvm mounts the layers as
# overlay lowerdirs), where renaming a directory fails with EXDEV (overlayfs without
# redirect_dir), and `hb import` swaps /data's entries by rename.
find /data -mindepth 1 -maxdepth 1 -exec rm -rf {{}} + 2>/dev/null
echo "base prepared"
"#
    )
}

/// Run as root at a new box's first boot: when smolvm (1.0.4) gave the pack's root files
/// back owned by the host user, make them root's again, then restore the recorded non-root
/// owners and set-id modes (a chown clears those bits).
///
/// The pack's files are read-only lower layers on 1.0.4 (smolvm mounts `<data dir>/pack`
/// as overlay lowerdirs) and its guest kernel has no overlayfs metacopy, so every chown
/// copies a whole file up into the box's own layer: repairing all of a provisioned base
/// costs ~2 GB of copies per box. When no account in the box holds the uid or gid smolvm
/// used (a macOS host's 501:20: uid 501 is nobody's, gid 20 is Debian's member-less
/// `dialout`), plain files under /usr and /opt (the tools: nearly all of the bytes) are
/// left as they are: nobody but root can write them, and the group grants nothing the
/// world does not. Everything else is root's again: directories (a directory's copy-up
/// copies no data), /etc, /var, /root and every other tree, set-id files, sudo's plugins,
/// files the group or the world may write, files the world may not read. When an account
/// does hold that uid or gid (a Linux host's 1000:1000 is the agent's), every file is
/// repaired, whatever it costs: that account would own the system otherwise.
pub fn repair_ownership_script() -> String {
    format!(
        r#"set -u
[ -e {MARKER} ] || {{ echo "no base marker: not a box from a base"; exit 0; }}
set -- $(stat -c '%u %g' {MARKER})
if [ "$1" = 0 ] && [ "$2" = 0 ]; then echo "ownership intact"; exit 0; fi
u=$1 g=$2
w=$(mktemp -d) || exit 1
trap 'rm -rf "$w"' EXIT
full=0
awk -F: -v u="$u" -v g="$g" '$3 == u || $4 == g {{ f = 1 }} END {{ exit !f }}' /etc/passwd && full=1
awk -F: -v g="$g" '$3 == g && $4 != "" {{ f = 1 }} END {{ exit !f }}' /etc/group && full=1
: > "$w/kept"
# Batched (xargs), not a process per file: a provisioned guest has ~100k files.
if [ "$full" = 1 ]; then
  find / {PRUNE} -uid "$u" -gid "$g" -print > "$w/reowned" || exit 1
else
  find / {PRUNE} -uid "$u" -gid "$g" \( -type f \( -path '/usr/*' -o -path '/opt/*' \) \
    ! -path '/usr/lib/sudo/*' ! -path '/usr/libexec/sudo/*' -perm -0004 ! -perm /6022 \
    \( ! -perm -0010 -o -perm -0001 \) -fprint "$w/kept" -o -print \) > "$w/reowned" || exit 1
  # Set-id files (recorded at build time; the host's chown may have cleared the bits) are
  # root's again whatever their mode is now.
  awk -v r="$w/reowned" -v k="$w/kept.plain" 'FILENAME == ARGV[1] {{ p = $0; sub(/^[^ ]* /, "", p); s[p] = 1; next }}
    {{ if ($0 in s) print >> r; else print > k }}' {SETID} "$w/kept" || exit 1
  : >> "$w/kept.plain"
  mv "$w/kept.plain" "$w/kept" || exit 1
fi
xargs -r -d '\n' chown -h 0:0 < "$w/reowned" || exit 1
# Give back the owners recorded at build time, for the files smolvm re-owned.
awk -v dir="$w" 'NR==FNR {{ r[$0] = 1; next }}
  {{ o = $1; p = substr($0, length(o) + 2); if (p in r) print p > (dir "/own." o) }}' \
  "$w/reowned" {OWNERS} || exit 1
for f in "$w"/own.*; do
  [ -e "$f" ] || continue
  xargs -r -d '\n' chown -h "${{f##*/own.}}" < "$f" || exit 1
done
while IFS=' ' read -r mode path; do [ -f "$path" ] && chmod "$mode" "$path"; done < {SETID}
kept=$(wc -l < "$w/kept")
if [ "$kept" -gt 0 ]; then
  echo "repaired ownership: the pack returned root's files as $u:$g ($(wc -l < "$w/reowned") files; $kept plain files under /usr and /opt stay $u:$g: no account in the box holds that uid or gid)"
else
  echo "repaired ownership: the pack returned root's files as $u:$g ($(wc -l < "$w/reowned") files)"
fi
"#
    )
}

/// A digest of what decides a base's contents on box's side (the steps it runs and its
/// preparation), so a box whose preparation changed never starts from an older base.
pub fn recipe_digest() -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for part in [BASE_STEPS, BASE_WORKLOAD, &prepare_script()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    hex::encode(h.finalize())
}

/// `tool=version` for each tool the base carries, from `hb versions` (`node:     v20…`
/// lines): hb keeps the answers it got (root's /var/cache/hermes-box), so every box made
/// from the base finds its tools' versions there instead of starting each runtime again
/// for its runtime manifest (1.1 s of each `box new` and `box load` from a base).
pub fn tool_versions(hb_versions: &str) -> Vec<String> {
    hb_versions
        .lines()
        .filter_map(|l| {
            let (tool, version) = l.split_once(':')?;
            let version = version.trim();
            (tool != "hb" && !version.is_empty() && version != "missing")
                .then(|| format!("{tool}={version}"))
        })
        .map(|l| l.chars().filter(|c| !c.is_control()).take(80).collect())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_versions_are_hb_versions_lines_of_tools_present() {
        let out = "node:     v20.20.2\nclaude:   2.1.197 (Claude Code)\ncodex:    missing\nhermes:   installed\nhb:       0.1.0 (abc)\n";
        assert_eq!(
            tool_versions(out),
            [
                "node=v20.20.2",
                "claude=2.1.197 (Claude Code)",
                "hermes=installed"
            ]
        );
    }
}
