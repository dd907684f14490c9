//! `hb logs <service> [-f] [-n N]`: the tail of `/data/logs/<service>.log`; `-f` follows
//! it across rotations.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, Result, bail};

use crate::context::Context;
use crate::paths::Paths;

/// Services with logs; aliases map to their file.
pub fn log_name(service: &str) -> Option<&'static str> {
    Some(match service {
        "executor" => "executor",
        "workload" => "workload",
        "provision" => "provision",
        "hermes" | "gateway" | "hermes-gateway" => "hermes-gateway",
        "cron" | "hermes-cron" => "hermes-cron",
        _ => return None,
    })
}

/// The last `n` lines of `bytes`.
pub fn tail(bytes: &[u8], n: usize) -> &[u8] {
    if n == 0 {
        return &[];
    }
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let mut seen = 0;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return &bytes[i + 1..];
            }
        }
    }
    bytes
}

pub fn run(ctx: &Context, args: &crate::cli::LogsArgs) -> Result<ExitCode> {
    let Some(name) = log_name(&args.service) else {
        bail!(
            "unknown service {:?}; choose executor, workload, provision, hermes-gateway or hermes-cron",
            args.service
        );
    };
    let path = Paths::new(&ctx.data).log(name);
    let mut out = std::io::stdout().lock();
    let mut file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !args.follow => {
            eprintln!("no log yet at {}", path.display());
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => loop {
            std::thread::sleep(Duration::from_millis(500));
            if let Ok(f) = File::open(&path) {
                break f;
            }
        },
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    out.write_all(tail(&bytes, args.lines))?;
    out.flush()?;
    if !args.follow {
        return Ok(ExitCode::SUCCESS);
    }
    let mut pos = bytes.len() as u64;
    let mut inode = file.metadata()?.ino();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n > 0 {
            pos += n as u64;
            if out.write_all(&buf[..n]).and_then(|_| out.flush()).is_err() {
                return Ok(ExitCode::SUCCESS); // reader went away
            }
            continue;
        }
        std::thread::sleep(Duration::from_millis(300));
        // Rotated (new inode) or truncated: start over on the new file.
        if let Ok(meta) = std::fs::metadata(&path)
            && (meta.ino() != inode || meta.len() < pos)
            && let Ok(f) = File::open(&path)
        {
            file = f;
            inode = meta.ino();
            pos = 0;
            file.seek(SeekFrom::Start(0))?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails() {
        assert_eq!(tail(b"a\nb\nc\n", 2), b"b\nc\n");
        assert_eq!(tail(b"a\nb\nc", 2), b"b\nc");
        assert_eq!(tail(b"a\nb\n", 5), b"a\nb\n");
        assert_eq!(tail(b"a\n", 0), b"");
        assert_eq!(log_name("gateway"), Some("hermes-gateway"));
        for s in box_proto::HermesService::ALL {
            assert_eq!(log_name(s.name()), Some(s.name()), "{s}");
        }
        assert_eq!(log_name("../etc/passwd"), None);
    }
}
