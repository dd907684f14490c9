//! The machine's credential CA: minted at create, kept for the machine's life in
//! `<data dir>/credentials/` (`ca.key` 0600, `ca.pem`), named `smolvm <machine> credential
//! CA` (the issuer smolvm's guests see), and name-constrained to the bound hosts' subtrees,
//! so a client rejects any certificate it signs for another domain.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, GeneralSubtree, IsCa, Issuer,
    KeyPair, KeyUsagePurpose, NameConstraints,
};

use crate::policy::credential::Binding;

pub fn dir(data: &Path) -> PathBuf {
    data.join("credentials")
}

fn params(machine: &str, bindings: &[Binding]) -> CertificateParams {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("smolvm {machine} credential CA"),
    );
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let mut subtrees: Vec<GeneralSubtree> = Vec::new();
    for b in bindings {
        for h in &b.hosts {
            let s = GeneralSubtree::DnsName(h.strip_prefix("*.").unwrap_or(h).to_string());
            if !subtrees.contains(&s) {
                subtrees.push(s);
            }
        }
    }
    p.name_constraints = Some(NameConstraints {
        permitted_subtrees: subtrees,
        excluded_subtrees: Vec::new(),
    });
    // rcgen's default validity (1975-4096) outlives any machine.
    p
}

/// Mint and store the CA of machine `machine` (at create).
pub fn create(data: &Path, machine: &str, bindings: &[Binding]) -> Result<(), String> {
    let d = dir(data);
    std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    let key = KeyPair::generate().map_err(|e| format!("credential CA key: {e}"))?;
    let cert = params(machine, bindings)
        .self_signed(&key)
        .map_err(|e| format!("credential CA: {e}"))?;
    write(&d.join("ca.key"), key.serialize_pem().as_bytes(), 0o600)?;
    write(&d.join("ca.pem"), cert.pem().as_bytes(), 0o644)
}

fn write(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(mode)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The stored CA, ready to issue leaf certificates.
pub struct Ca {
    issuer: Issuer<'static, KeyPair>,
    pub pem: String,
}

impl Ca {
    pub fn load(data: &Path, machine: &str, bindings: &[Binding]) -> Result<Self, String> {
        let d = dir(data);
        let read = |f: &str| {
            std::fs::read_to_string(d.join(f)).map_err(|e| format!("{}: {e}", d.join(f).display()))
        };
        let key = KeyPair::from_pem(&read("ca.key")?).map_err(|e| format!("ca.key: {e}"))?;
        Ok(Self {
            issuer: Issuer::new(params(machine, bindings), key),
            pem: read("ca.pem")?,
        })
    }

    /// A server certificate for `host` (chain: leaf, CA) and its key, DER.
    pub fn issue(
        &self,
        host: &str,
    ) -> Result<
        (
            Vec<rustls::pki_types::CertificateDer<'static>>,
            rustls::pki_types::PrivateKeyDer<'static>,
        ),
        String,
    > {
        let key = KeyPair::generate().map_err(|e| format!("leaf key: {e}"))?;
        let mut p = CertificateParams::new(vec![host.to_string()])
            .map_err(|e| format!("leaf for {host}: {e}"))?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, host);
        p.distinguished_name = dn;
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = p
            .signed_by(&key, &self.issuer)
            .map_err(|e| format!("leaf for {host}: {e}"))?;
        use rustls::pki_types::pem::PemObject;
        let ca_der = rustls::pki_types::CertificateDer::from_pem_slice(self.pem.as_bytes())
            .map_err(|e| format!("ca.pem: {e}"))?;
        let key_der = rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der())
            .map_err(|e| format!("leaf key: {e}"))?;
        Ok((vec![cert.der().clone(), ca_der], key_der))
    }
}
