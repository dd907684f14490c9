//! The network settings box hands in from the host (issue 11: `PROPAGATE_PROXY`,
//! `GUEST_CA_CERTS`), as environment for what hb starts (Executor), the same the login
//! profile gives the agent's shells. Read from the files box copies in; the proxy values
//! may carry credentials and are only ever passed on as environment, never printed
//! (`box_proto::proxy::redact` for that).

use std::path::PathBuf;

/// The proxies box wrote (`KEY='value'` lines, both cases).
pub fn proxy_env_file() -> PathBuf {
    std::env::var_os("HB_PROXY_ENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/hermes-box/proxy.env"))
}

/// The extra CA certificates (PEM) box copied in.
pub fn ca_certs_file() -> PathBuf {
    std::env::var_os("HB_CA_CERTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/etc/hermes-box/ca-certs.pem"))
}

/// The system bundle provisioning rebuilt with the extra certificates in it.
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The proxy variables box handed in, in the file's order.
pub fn proxies() -> Vec<(String, String)> {
    proxies_from(&proxy_env_file())
}

/// The proxy variables of a proxy.env file; unknown keys are ignored.
pub fn proxies_from(file: &std::path::Path) -> Vec<(String, String)> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('='))
        .filter(|(k, _)| {
            box_proto::proxy::NAMES
                .iter()
                .any(|n| n == k || n.to_ascii_lowercase() == *k)
        })
        .map(|(k, v)| {
            let v = v
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .unwrap_or(v);
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// What provisioning writes for node: the extra CA certificates and the box's credential CA,
/// which node adds to its own roots.
const NODE_EXTRA: &str = "/etc/hermes-box/node-extra-ca.pem";

/// Everything to add to a child's environment: the proxies and, with certificates beyond
/// the image's roots (GUEST_CA_CERTS, the box's credential CA), the variables node/npm,
/// pip, git and curl read: the one bundle the login profile names too.
pub fn vars() -> Vec<(String, String)> {
    let mut out = proxies();
    let non_empty = |p: &std::path::Path| std::fs::metadata(p).is_ok_and(|m| m.len() > 0);
    // A box provisioned before the credential CA joined the trust: its extras alone.
    let extra = [PathBuf::from(NODE_EXTRA), ca_certs_file()]
        .into_iter()
        .find(|p| non_empty(p));
    if let Some(extra) = extra
        && non_empty(std::path::Path::new(SYSTEM_BUNDLE))
    {
        out.push(("NODE_EXTRA_CA_CERTS".into(), extra.display().to_string()));
        for k in [
            "SSL_CERT_FILE",
            "CURL_CA_BUNDLE",
            "GIT_SSL_CAINFO",
            "PIP_CERT",
            "REQUESTS_CA_BUNDLE",
        ] {
            out.push((k.into(), SYSTEM_BUNDLE.into()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_box_writes_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let f = tmp.path().join("proxy.env");
        std::fs::write(
            &f,
            "# written by box\nHTTPS_PROXY='http://u:p@h:1'\nhttps_proxy='http://u:p@h:1'\nPATH='/evil'\nNO_PROXY='a,b'\n",
        )
        .unwrap();
        let got = proxies_from(&f);
        assert_eq!(
            got,
            [
                ("HTTPS_PROXY".to_string(), "http://u:p@h:1".to_string()),
                ("https_proxy".to_string(), "http://u:p@h:1".to_string()),
                ("NO_PROXY".to_string(), "a,b".to_string()),
            ]
        );
    }
}
