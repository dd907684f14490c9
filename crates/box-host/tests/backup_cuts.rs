//! A backup box wrote, cut at each exact OpenPGP packet boundary (the end of the key
//! packet, inside the encrypted packet's header, at every partial-body length, around the
//! MDC), then loaded through sequoia as `box load` and `box extract` read it: each must be
//! refused as "corrupt or truncated": never accepted, never a panic, never blamed on the
//! passphrase or the format. (seipd.rs's unit tests cut box's own verifier at fixed
//! offsets; this finds the framing's real offsets in the file.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;

use std::fs;
use std::io::Read;
use std::path::Path;

use backup_support::*;

/// One packet header at `at`: (tag, header length, body length, partial?).
fn header(b: &[u8], at: usize) -> (u8, usize, usize, bool) {
    let ctb = b[at];
    assert_eq!(ctb & 0xc0, 0xc0, "box writes new-format headers (at {at})");
    let a = b[at + 1] as usize;
    match a {
        0..=191 => (ctb & 0x3f, 2, a, false),
        192..=223 => (
            ctb & 0x3f,
            3,
            ((a - 192) << 8) + b[at + 2] as usize + 192,
            false,
        ),
        255 => {
            let n = u32::from_be_bytes(b[at + 2..at + 6].try_into().unwrap());
            (ctb & 0x3f, 6, n as usize, false)
        }
        _ => (ctb & 0x3f, 2, 1 << (a & 0x1f), true),
    }
}

/// A partial body's next length at `at`: (length octets, body length, partial?).
fn body_length(b: &[u8], at: usize) -> (usize, usize, bool) {
    let a = b[at] as usize;
    match a {
        0..=191 => (1, a, false),
        192..=223 => (2, ((a - 192) << 8) + b[at + 1] as usize + 192, false),
        255 => (
            5,
            u32::from_be_bytes(b[at + 1..at + 5].try_into().unwrap()) as usize,
            false,
        ),
        _ => (1, 1 << (a & 0x1f), true),
    }
}

/// Every offset at which the framing of `b` (SKESK, then one SEIPD) changes, by name.
fn boundaries(b: &[u8]) -> Vec<(String, usize)> {
    let mut cuts = Vec::new();
    let (tag, hlen, len, partial) = header(b, 0);
    assert_eq!((tag, partial), (3, false), "an SKESK first");
    let seip = hlen + len;
    cuts.push(("the end of the SKESK".to_string(), seip));
    let (tag, hlen, mut chunk, mut partial) = header(b, seip);
    assert_eq!(tag, 18, "a SEIPD after the SKESK");
    cuts.push(("inside the SEIPD header".into(), seip + 1));
    let body = seip + hlen;
    cuts.push(("the end of the SEIPD header".into(), body));
    cuts.push(("after the SEIPD version".into(), body + 1));
    cuts.push(("inside the random prefix".into(), body + 1 + 9));
    cuts.push(("after the random prefix".into(), body + 1 + 18));
    let mut at = body;
    let mut chunks = 0;
    while partial {
        at += chunk;
        chunks += 1;
        let (octets, next, more) = body_length(b, at);
        cuts.push((format!("before partial-body length {chunks}"), at));
        for i in 1..octets {
            cuts.push((format!("inside partial-body length {chunks}"), at + i));
        }
        cuts.push((format!("after partial-body length {chunks}"), at + octets));
        cuts.push((
            format!("one byte into chunk {}", chunks + 1),
            at + octets + 1,
        ));
        at += octets;
        chunk = next;
        partial = more;
    }
    assert_eq!(at + chunk, b.len(), "the SEIPD ends the file");
    assert!(chunks >= 2, "want several partial bodies, got {chunks}");
    let end = b.len();
    cuts.push(("before the MDC".into(), end - 22));
    cuts.push(("after the MDC's header".into(), end - 20));
    cuts.push(("inside the MDC's digest".into(), end - 10));
    cuts.push(("one byte short".into(), end - 1));
    cuts
}

/// The verdict of both load passes on `path`: pass 1 (validate) and pass 2 (parts), each
/// with any panic turned into an error.
fn load_verdicts(path: &Path, dir: &Path) -> Vec<Result<String, String>> {
    let pass = secret(PASS);
    let run = |f: &dyn Fn() -> anyhow::Result<()>| -> Result<String, String> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(Ok(())) => Ok("accepted".into()),
            Ok(Err(e)) => Ok(format!("{e:#}")),
            Err(_) => Err("panicked".into()),
        }
    };
    let validate = run(&|| {
        box_host::backup::load::validate_backup(path, &pass)?;
        Ok(())
    });
    let parts = run(&|| {
        box_host::backup::load::write_parts(path, &pass, &[0; 32], 1 << 20, dir, |_, _| Ok(()))?;
        Ok(())
    });
    // The decrypting reader both passes sit on: it fails reading, and records why for
    // its callers to report as corruption (as load.rs does).
    let reader = run(&|| {
        let mut r = box_host::backup::crypto::DecryptReader::open(path, &pass)?;
        let mut sink = Vec::new();
        match r.read_to_end(&mut sink) {
            Ok(_) => anyhow::bail!("accepted (authenticated: {})", r.authenticated()),
            Err(e) => match r.status().failure() {
                Some(why) => anyhow::bail!("{}", box_host::backup::BackupError::Corrupt(why)),
                None => anyhow::bail!("failed without a recorded cause: {e}"),
            },
        }
    });
    vec![validate, parts, reader]
}

#[test]
fn a_backup_cut_at_each_packet_boundary_is_refused_as_corrupt_or_truncated() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("data");
    sample_tree(&root);
    // Incompressible data, so the backup spans several partial-body chunks.
    let mut noise = vec![0u8; 9 << 20];
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    for b in noise.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = (x >> 32) as u8;
    }
    fs::write(root.join("home/agent/workspace/noise.bin"), &noise).unwrap();
    export(&root, &t.path().join("parts"), 4 << 20);
    let out = t.path().join("b/a-20261129-120000.tar.zst.gpg");
    save_parts(&t.path().join("parts"), &out, PASS);
    let good = fs::read(&out).unwrap();
    let parts = t.path().join("p2");
    fs::create_dir(&parts).unwrap();
    // The whole file loads: the cuts below are the only difference.
    assert!(box_host::backup::load::validate_backup(&out, &secret(PASS)).is_ok());

    let cut = t.path().join("cut.tar.zst.gpg");
    let mut failures = Vec::new();
    for (what, at) in boundaries(&good) {
        fs::write(&cut, &good[..at]).unwrap();
        for (pass, verdict) in ["validate", "write_parts", "decrypt"]
            .iter()
            .zip(load_verdicts(&cut, &parts))
        {
            match verdict {
                Ok(e) if e.contains("corrupt or truncated") => {}
                Ok(e) => failures.push(format!("cut {what} (at {at}): {pass}: {e}")),
                Err(p) => failures.push(format!("cut {what} (at {at}): {pass} {p}")),
            }
        }
        assert!(listing(&parts).is_empty(), "a part left after a cut {what}");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
