//! Image references: smolvm's canonical spelling, the images smolvm-sim can build from the
//! Debian archive, and the stand-ins for images it cannot build (SMOLVM_SIM_IMAGE_MAP).

/// The images `build-image.sh` has a recipe for, by their short (Docker Hub) names.
pub const BUILDABLE: [&str; 2] = ["debian:12", "debian:13"];

/// Stand-ins used unless SMOLVM_SIM_IMAGE_MAP says otherwise: there is no Ubuntu archive
/// here, so the Ubuntu images box defaults to boot Debian 13 (same apt, same glibc era), and
/// the simulator says so at every create.
const DEFAULT_MAP: [(&str, &str); 2] =
    [("ubuntu:24.04", "debian:13"), ("ubuntu:26.04", "debian:13")];

/// Tags that name the same Debian release as a buildable image.
const ALIASES: [(&str, &str); 2] = [
    ("debian:bookworm", "debian:12"),
    ("debian:trixie", "debian:13"),
];

/// What the guest of an image machine boots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// The simulator builds this image itself (short name, e.g. `debian:13`).
    Buildable(String),
    /// The image cannot be built here; `stand_in` (buildable) boots instead.
    StandIn { requested: String, stand_in: String },
    /// Neither buildable nor mapped: the first start fails as smolvm's pull would.
    Unknown,
}

/// smolvm's canonical form (`smolvm_protocol::normalize_image_ref`): `docker.io` for a
/// missing registry, `library/` for one-component Docker Hub names, `:latest` for a
/// missing tag, a digest instead of any tag.
pub fn normalize(image: &str) -> String {
    let image = image
        .strip_prefix("index.docker.io/")
        .map(|r| format!("docker.io/{r}"))
        .unwrap_or_else(|| image.to_string());
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n.to_string(), Some(d.to_string())),
        None => (image.clone(), None),
    };
    // A tag is a ':' after the last '/' (a ':' before it is a registry port).
    let slash = name.rfind('/').map_or(0, |i| i + 1);
    let (repo, tag) = match name[slash..].rfind(':') {
        Some(i) => (
            name[..slash + i].to_string(),
            Some(name[slash + i + 1..].to_string()),
        ),
        None => (name.clone(), None),
    };
    let (registry, path) = match repo.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            (first.to_string(), rest.to_string())
        }
        _ => ("docker.io".to_string(), repo.clone()),
    };
    let path = if registry == "docker.io" && !path.contains('/') {
        format!("library/{path}")
    } else {
        path
    };
    let suffix = match digest {
        Some(d) => format!("@{d}"),
        None => format!(":{}", tag.unwrap_or_else(|| "latest".to_string())),
    };
    format!("{registry}/{path}{suffix}")
}

/// The Docker Hub short form of a canonical reference (`docker.io/library/ubuntu:24.04` →
/// `ubuntu:24.04`); other references are returned canonical.
pub fn short(image: &str) -> String {
    let n = normalize(image);
    n.strip_prefix("docker.io/library/")
        .map(str::to_string)
        .unwrap_or(n)
}

/// Parses SMOLVM_SIM_IMAGE_MAP (`FROM=TO[,FROM=TO…]`); every TO must be buildable.
pub fn parse_map(spec: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((from, to)) = entry.split_once('=') else {
            return Err(format!(
                "SMOLVM_SIM_IMAGE_MAP entry {entry:?} is not FROM=TO (e.g. ubuntu:24.04=debian:13)"
            ));
        };
        let to = canonical_buildable(to.trim()).ok_or_else(|| {
            format!(
                "SMOLVM_SIM_IMAGE_MAP maps {} to {}, which smolvm-sim cannot build (it builds {})",
                from.trim(),
                to.trim(),
                BUILDABLE.join(", ")
            )
        })?;
        out.push((short(from.trim()), to));
    }
    Ok(out)
}

/// The buildable short name `image` stands for, if any (aliases included).
fn canonical_buildable(image: &str) -> Option<String> {
    let s = short(image);
    let s = ALIASES
        .iter()
        .find(|(alias, _)| *alias == s)
        .map_or(s, |(_, real)| real.to_string());
    BUILDABLE.contains(&s.as_str()).then_some(s)
}

/// What `image` boots, given the SMOLVM_SIM_IMAGE_MAP value (`None`: unset). The map wins
/// over the defaults and over building an image directly.
pub fn resolve(image: &str, map: Option<&str>) -> Result<Resolved, String> {
    let requested = short(image);
    let user = map.map(parse_map).transpose()?.unwrap_or_default();
    let mapped = user
        .iter()
        .map(|(f, t)| (f.clone(), t.clone()))
        .chain(
            DEFAULT_MAP
                .iter()
                .map(|(f, t)| (f.to_string(), t.to_string())),
        )
        .find(|(from, _)| *from == requested);
    if let Some((_, to)) = mapped {
        if to == requested {
            return Ok(Resolved::Buildable(to));
        }
        return Ok(Resolved::StandIn {
            requested,
            stand_in: to,
        });
    }
    Ok(canonical_buildable(&requested).map_or(Resolved::Unknown, Resolved::Buildable))
}

/// smolvm's error for an image it cannot pull (`agent operation failed: pull image: …`).
/// The prefix is smolvm's (`src/agent/client.rs` "pull image", the agent's
/// `crane manifest failed: <crane stderr>`); the crane part follows go-containerregistry's
/// wording for Docker Hub's answers: an unknown tag of a known repository is
/// MANIFEST_UNKNOWN, anything else UNAUTHORIZED (Hub's answer for a repository that does
/// not exist); another registry is unreachable from here.
pub fn pull_error_reason(image: &str) -> String {
    let canon = normalize(image);
    let (registry, rest) = canon.split_once('/').unwrap_or(("docker.io", &canon));
    let (path, reference) = match rest.split_once('@') {
        Some((p, d)) => (p.to_string(), d.to_string()),
        None => match rest.rsplit_once(':') {
            Some((p, t)) => (p.to_string(), t.to_string()),
            None => (rest.to_string(), "latest".to_string()),
        },
    };
    let crane = if registry == "docker.io" {
        let url = format!("https://index.docker.io/v2/{path}/manifests/{reference}");
        if ["library/ubuntu", "library/debian"].contains(&path.as_str()) {
            format!("GET {url}: MANIFEST_UNKNOWN: manifest unknown; unknown tag={reference}")
        } else {
            format!(
                "GET {url}: UNAUTHORIZED: authentication required; [map[Action:pull Class: Name:{path} Type:repository]]"
            )
        }
    } else {
        format!("Get \"https://{registry}/v2/\": dial tcp: lookup {registry}: no such host")
    };
    format!("crane manifest failed: Error: fetching manifest {canon}: {crane}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_smolvm() {
        assert_eq!(normalize("alpine"), "docker.io/library/alpine:latest");
        assert_eq!(normalize("ubuntu:24.04"), "docker.io/library/ubuntu:24.04");
        assert_eq!(
            normalize("docker.io/ubuntu:24.04"),
            "docker.io/library/ubuntu:24.04"
        );
        assert_eq!(
            normalize("index.docker.io/library/debian:13"),
            "docker.io/library/debian:13"
        );
        assert_eq!(normalize("ghcr.io/o/r:v1"), "ghcr.io/o/r:v1");
        assert_eq!(normalize("localhost:5000/r"), "localhost:5000/r:latest");
        assert_eq!(
            normalize("debian@sha256:ab"),
            "docker.io/library/debian@sha256:ab"
        );
        assert_eq!(short("docker.io/library/ubuntu:24.04"), "ubuntu:24.04");
    }

    #[test]
    fn resolves_buildable_mapped_and_unknown() {
        assert_eq!(
            resolve("debian:13", None),
            Ok(Resolved::Buildable("debian:13".into()))
        );
        assert_eq!(
            resolve("debian:bookworm", None),
            Ok(Resolved::Buildable("debian:12".into()))
        );
        assert_eq!(
            resolve("docker.io/library/ubuntu:24.04", None),
            Ok(Resolved::StandIn {
                requested: "ubuntu:24.04".into(),
                stand_in: "debian:13".into()
            })
        );
        assert_eq!(
            resolve("ubuntu:24.04", Some("ubuntu:24.04=debian:12")),
            Ok(Resolved::StandIn {
                requested: "ubuntu:24.04".into(),
                stand_in: "debian:12".into()
            })
        );
        assert_eq!(resolve("ubuntu:22.04", None), Ok(Resolved::Unknown));
        assert_eq!(resolve("alpine", None), Ok(Resolved::Unknown));
        assert!(resolve("ubuntu:24.04", Some("ubuntu:24.04=alpine")).is_err());
        assert!(resolve("ubuntu:24.04", Some("garbage")).is_err());
    }

    #[test]
    fn pull_errors_read_like_crane_through_smolvm() {
        let e = pull_error_reason("ubuntu:99.04");
        assert!(e.starts_with(
            "crane manifest failed: Error: fetching manifest docker.io/library/ubuntu:99.04: GET https://index.docker.io/v2/library/ubuntu/manifests/99.04: MANIFEST_UNKNOWN"
        ), "{e}");
        assert!(pull_error_reason("nosuch/thing").contains("UNAUTHORIZED"));
        assert!(pull_error_reason("ghcr.io/o/r:1").contains("lookup ghcr.io"));
    }
}
