//! The bytes of a simulated `.smolmachine`, laid out as smolvm's sidecar is
//! (`crates/smolvm-pack/src/format.rs`@v1.0.4: "compressed_assets + manifest + footer"):
//!
//! 1. the assets: a tar of the machine's persistent guest dir, zstd level 3, one thread
//!    (smolvm: `zstd::stream::Encoder::new(out, ZSTD_LEVEL)` with `ZSTD_LEVEL = 3`,
//!    `assets.rs`@v1.0.4 L36 and L455);
//! 2. the manifest, JSON, uncompressed, so it is read without decompressing anything
//!    (`read_manifest_from_sidecar`);
//! 3. a footer with the two sizes and a CRC32 of assets + manifest (smolvm's `PackFooter`
//!    `checksum`, "CRC32 of assets + manifest", format.rs@v1.0.4 L222-238).
//!
//! smolvm's footer is binary; the simulator's is a 512-byte NUL-padded text line, so a
//! test can read it. `machine create --from` does not check the CRC (smolvm 1.0.4 checks it
//! only in `pack run`, src/cli/pack_run.rs L215): damage shows up while decoding. The
//! simulator's zstd frames carry zstd's content checksum (the `zstd` program's default),
//! so damage anywhere is caught by that one decoding pass; smolvm's encoder writes none
//! and catches what the decoder or the tar reader trips over. The failure texts are the
//! zstd library's error names, as smolvm's `extract sidecar: <zstd error>`.

use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::output::{SimError, agent};

use super::Manifest;

/// What the simulator's packs say they are, so a foreign or older file is refused clearly.
pub const FORMAT: &str = "smolvm-sim-pack/2";
const FOOTER_MAGIC: &str = "SMOLVM-SIM-PACK-FOOTER/2";
pub const FOOTER_LEN: u64 = 512;
/// smolvm's `MAX_MANIFEST_SIZE` guard against a hostile footer (packer.rs@v1.0.4).
const MAX_MANIFEST: u64 = 1 << 20;

/// Where the parts of a pack are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footer {
    pub assets_size: u64,
    pub manifest_size: u64,
    pub crc32: u32,
}

impl Footer {
    fn render(&self) -> Vec<u8> {
        let mut b = format!(
            "{FOOTER_MAGIC} assets_size={} manifest_size={} crc32={:08x}\n",
            self.assets_size, self.manifest_size, self.crc32
        )
        .into_bytes();
        b.resize(FOOTER_LEN as usize, 0);
        b
    }

    /// Parses a footer and checks it against the file's length (a truncated file fails).
    pub fn parse(buf: &[u8], total: u64) -> Result<Self, String> {
        let text = String::from_utf8_lossy(buf);
        let line = text.trim_end_matches('\0');
        let rest = line
            .strip_prefix(FOOTER_MAGIC)
            .ok_or("invalid footer magic")?;
        let field = |k: &str| {
            rest.split_whitespace()
                .find_map(|w| w.strip_prefix(k))
                .ok_or("invalid footer magic")
        };
        let num = |k: &str| -> Result<u64, String> {
            field(k)?
                .parse::<u64>()
                .map_err(|_| "invalid footer magic".to_string())
        };
        let f = Footer {
            assets_size: num("assets_size=")?,
            manifest_size: num("manifest_size=")?,
            crc32: u32::from_str_radix(field("crc32=")?, 16)
                .map_err(|_| "invalid footer magic".to_string())?,
        };
        if f.manifest_size > MAX_MANIFEST {
            return Err(format!(
                "manifest size ({} bytes) exceeds maximum ({MAX_MANIFEST} bytes)",
                f.manifest_size
            ));
        }
        let end = f
            .assets_size
            .checked_add(f.manifest_size)
            .and_then(|n| n.checked_add(FOOTER_LEN));
        if end != Some(total) {
            return Err("footer sizes do not match the file (truncated?)".to_string());
        }
        Ok(f)
    }
}

/// Reads and checks the footer of `sidecar`.
pub fn read_footer(sidecar: &Path) -> Result<Footer, SimError> {
    let fail = |why: String| agent("read sidecar footer", why);
    let mut f = fs::File::open(sidecar).map_err(|e| fail(e.to_string()))?;
    let total = f.metadata().map_err(|e| fail(e.to_string()))?.len();
    if total < FOOTER_LEN {
        return Err(fail("file too small for a footer".to_string()));
    }
    f.seek(SeekFrom::Start(total - FOOTER_LEN))
        .map_err(|e| fail(e.to_string()))?;
    let mut buf = vec![0u8; FOOTER_LEN as usize];
    f.read_exact(&mut buf).map_err(|e| fail(e.to_string()))?;
    Footer::parse(&buf, total).map_err(fail)
}

/// The manifest of a `.smolmachine`, read without extracting anything. A file that is not
/// a pack, or not one of ours, is `read .smolmachine` failing, as smolvm's manifest reader.
pub fn read_manifest(sidecar: &Path) -> Result<Manifest, SimError> {
    let fail = |why: String| agent("read .smolmachine", why);
    let footer = read_footer(sidecar).map_err(|e| match e {
        SimError::Agent { reason, .. } => fail(reason),
        other => other,
    })?;
    let mut f = fs::File::open(sidecar).map_err(|e| fail(e.to_string()))?;
    f.seek(SeekFrom::Start(footer.assets_size))
        .map_err(|e| fail(e.to_string()))?;
    let mut body = vec![0u8; footer.manifest_size as usize];
    f.read_exact(&mut body)
        .map_err(|e| fail(format!("truncated manifest: {e}")))?;
    let m: Manifest =
        serde_json::from_slice(&body).map_err(|e| fail(format!("invalid manifest: {e}")))?;
    if m.format != FORMAT {
        return Err(fail(format!("unsupported pack format {:?}", m.format)));
    }
    Ok(m)
}

/// The message a failed child left on stderr: GNU tar's first error (it ends with
/// "Exiting with failure status ..."), zstd's error name (after its last " : ").
fn child_error(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.contains("Exiting with failure status"))
        .unwrap_or("failed without a message");
    match line.rsplit_once(" : ") {
        Some((_, name)) if !name.trim().is_empty() => name.trim().to_string(),
        _ => line.to_string(),
    }
}

fn spawn(cmd: &mut Command, what: &str, op: &str) -> Result<Child, SimError> {
    cmd.stderr(Stdio::piped())
        .spawn()
        .map_err(|e| agent(op, format!("cannot run {what}: {e}")))
}

fn finish(child: Child, op: &str) -> Result<(), SimError> {
    let out = child
        .wait_with_output()
        .map_err(|e| agent(op, e.to_string()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(agent(op, child_error(&out.stderr)))
    }
}

/// Writes `out` (a new file): `tar` of `guest`'s entries piped through `zstd -3`, then the
/// manifest and the footer. GNU tar keeps numeric owners, modes, overlay whiteouts (0/0
/// char devices), `trusted.overlay.*` xattrs and sparse files.
pub fn write(
    manifest: &Manifest,
    tar_args: &[std::ffi::OsString],
    out: &Path,
) -> Result<u64, SimError> {
    let op = "pack binary";
    let body = serde_json::to_vec_pretty(manifest).map_err(|e| agent(op, e.to_string()))?;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
        .map_err(|e| agent(op, format!("{}: {e}", out.display())))?;
    let mut tar = spawn(
        Command::new("tar")
            .args(["--create", "--file", "-"])
            .args(tar_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped()),
        "tar",
        op,
    )?;
    let tar_out = tar
        .stdout
        .take()
        .ok_or_else(|| agent(op, "tar has no stdout"))?;
    let mut zstd = spawn(
        Command::new("zstd")
            .args(["-3", "-T1", "-q", "-c"])
            .stdin(Stdio::from(tar_out))
            .stdout(Stdio::piped()),
        "zstd",
        op,
    )?;
    let mut z_out = zstd
        .stdout
        .take()
        .ok_or_else(|| agent(op, "zstd has no stdout"))?;
    let mut crc = crc32fast::Hasher::new();
    let mut assets_size = 0u64;
    let mut buf = vec![0u8; 1 << 20];
    let copied = loop {
        match z_out.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                crc.update(&buf[..n]);
                assets_size += n as u64;
                if let Err(e) = file.write_all(&buf[..n]) {
                    break Err(e);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    drop(z_out);
    let tar_done = finish(tar, op);
    let zstd_done = finish(zstd, op);
    tar_done?;
    zstd_done?;
    copied.map_err(|e| agent(op, format!("{}: {e}", out.display())))?;
    crc.update(&body);
    let footer = Footer {
        assets_size,
        manifest_size: body.len() as u64,
        crc32: crc.finalize(),
    };
    file.write_all(&body)
        .and_then(|_| file.write_all(&footer.render()))
        .and_then(|_| file.sync_all())
        .map_err(|e| agent(op, format!("{}: {e}", out.display())))?;
    Ok(assets_size + footer.manifest_size + FOOTER_LEN)
}

/// Decodes the assets of `sidecar` into `dir` in one streaming pass (`zstd -d | tar -x`),
/// as smolvm's `extract_sidecar_inner` (a zstd `Decoder` over the first `assets_size`
/// bytes, into `tar::Archive`). `tar_args` says how to extract (owners, xattrs).
pub fn extract(sidecar: &Path, dir: &Path, tar_args: &[&str]) -> Result<(), SimError> {
    let op = "extract sidecar";
    let footer = read_footer(sidecar).map_err(|e| match e {
        SimError::Agent { reason, .. } => agent(op, reason),
        other => other,
    })?;
    let file = fs::File::open(sidecar).map_err(|e| agent(op, e.to_string()))?;
    let mut zstd = spawn(
        Command::new("zstd")
            .args(["-d", "-q", "-c"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
        "zstd",
        op,
    )?;
    let z_out = zstd
        .stdout
        .take()
        .ok_or_else(|| agent(op, "zstd has no stdout"))?;
    let mut z_in = zstd
        .stdin
        .take()
        .ok_or_else(|| agent(op, "zstd has no stdin"))?;
    let tar = spawn(
        Command::new("tar")
            .args(["--extract", "--file", "-"])
            .args(tar_args)
            .arg("--directory")
            .arg(dir)
            .stdin(Stdio::from(z_out))
            .stdout(Stdio::null()),
        "tar",
        op,
    )?;
    let feeder = std::thread::spawn(move || {
        let mut assets = file.take(footer.assets_size);
        // A decoder that stops early (damage) closes its stdin: not our error to report.
        let _ = std::io::copy(&mut assets, &mut z_in);
    });
    let zstd_done = finish(zstd, op);
    let tar_done = finish(tar, op);
    let _ = feeder.join();
    // The decoder's complaint is the cause; tar's ("Skipping to next header") follows it.
    zstd_done?;
    tar_done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_footer_round_trips_and_must_match_the_length() {
        let f = Footer {
            assets_size: 1000,
            manifest_size: 20,
            crc32: 0xdead_beef,
        };
        let b = f.render();
        assert_eq!(b.len() as u64, FOOTER_LEN);
        assert_eq!(Footer::parse(&b, 1000 + 20 + FOOTER_LEN), Ok(f));
        assert!(Footer::parse(&b, 700).is_err(), "truncated");
        assert!(Footer::parse(&[b'x'; 512], 1532).is_err(), "not a footer");
    }

    #[test]
    fn a_hostile_footer_is_refused() {
        let f = Footer {
            assets_size: u64::MAX - 10,
            manifest_size: 20,
            crc32: 0,
        };
        assert!(Footer::parse(&f.render(), 100).is_err(), "overflow");
        let f = Footer {
            assets_size: 0,
            manifest_size: 1 << 30,
            crc32: 0,
        };
        let e = Footer::parse(&f.render(), (1 << 30) + FOOTER_LEN).unwrap_err();
        assert!(e.contains("exceeds maximum"), "{e}");
    }

    #[test]
    fn zstd_and_tar_errors_are_shortened_to_their_cause() {
        assert_eq!(
            child_error(
                b"/*stdin*\\ : Decoding error (36) : Restored data doesn't match checksum \n"
            ),
            "Restored data doesn't match checksum"
        );
        assert_eq!(
            child_error(b"tar: Skipping to next header\ntar: Exiting with failure status due to previous errors\n"),
            "tar: Skipping to next header"
        );
    }
}
