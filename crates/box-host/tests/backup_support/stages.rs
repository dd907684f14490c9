//! `backup_harness stages <data-root> <parts-dir> <scratch>`: the limit of box's save +
//! verify, stage by stage (issue 32). Each pass the pipeline makes over the data runs
//! here alone, on the same corpus and the same export (`hb export`'s parts, read from the
//! page cache), one after another on one otherwise idle process, with box's settings:
//!
//! ```text
//! walk + read       the data root, sorted, every regular file read in 1 MiB pieces
//! tar framing       the same walk written as a tar stream to nowhere, minus the walk
//! zstd -3, 2 workers  hb's encoder (2 MiB jobs, checksum) over hb's own tar stream
//! XXH3-128          each part's check (hb and box each hash every part once)
//! AES-256-CFB enc   the SEIPD body (serial: each block needs the one before), alone
//! SHA-1             the MDC, alone
//! enc + SHA-1       the writer's pass: both, stitched 64 bytes at a time as box runs them
//! write + fsync     the backup file, with box's early writeback and drop-behind
//! write the parts   hb's parts (into the page cache, no fsync)
//! copy a part       what `machine cp` is on one host: a file copy
//! AES-256-CFB dec   parallel blocks, alone
//! dec + SHA-1       the verifier's pass: both, stitched 1 KiB at a time
//! SHA-256           the verifier's name for the backup file (what a chain knows it by)
//! XXH3-128          a named temp's fingerprint and re-read (none for an unnamed file)
//! zstd decode       the validator's first half
//! tar walk + rules  the validator's second half, minus its zstd decode
//! ```
//!
//! One line per stage on stdout, `stage\t<name>\t<bytes in>\t<wall s>\t<cpu s>\t<passes>`
//! (`passes`: how many times a save + verify makes it; 0 for a stage shown for its own
//! speed that box runs inside another), for scripts/bench.sh to take medians of and
//! compare with the whole save. Asserts nothing.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::Path;
use std::time::Instant;

use aes::Aes256;
use aes::cipher::inout::InOutBuf;
use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use anyhow::{Context as _, Result};
use box_host::backup::page_cache::DropBehind;
use box_host::backup::seipd;
use box_proto::archive::compress;
use box_proto::archive::part_hash::{PartHashAlgo, PartHasher};
use box_proto::archive::validate::{self, Limits};
use sha1::Sha1;
use sha2::{Digest, Sha256};

const CHUNK: usize = 1 << 20;

/// User + system CPU seconds of this process so far (its threads included).
fn cpu_now() -> f64 {
    // SAFETY: getrusage fills the struct it is given; RUSAGE_SELF needs nothing else.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

struct Timed {
    wall: f64,
    cpu: f64,
}

fn timed(f: impl FnOnce() -> Result<()>) -> Result<Timed> {
    let (c0, t0) = (cpu_now(), Instant::now());
    f()?;
    Ok(Timed {
        wall: t0.elapsed().as_secs_f64(),
        cpu: cpu_now() - c0,
    })
}

fn report(name: &str, bytes: u64, t: &Timed, passes: u32) {
    println!(
        "stage\t{name}\t{bytes}\t{:.4}\t{:.4}\t{passes}",
        t.wall, t.cpu
    );
}

/// Every entry under `dir`, sorted, depth first, regular files read through `buf`; with
/// `frame`, each also written as hb writes a member (a 512-byte header, the data, the
/// padding) into a sink. Returns the bytes read.
fn walk(dir: &Path, buf: &mut [u8], frame: bool, bytes: &mut u64) -> Result<()> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .with_context(|| format!("cannot list {}", dir.display()))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()?;
    names.sort();
    let mut sink = io::sink();
    for name in names {
        let path = dir.join(&name);
        let meta = fs::symlink_metadata(&path)?;
        let ft = meta.file_type();
        if frame {
            let mut header = tar::Header::new_gnu();
            header.set_metadata_in_mode(&meta, tar::HeaderMode::Complete);
            if ft.is_symlink() {
                header.set_link_name(fs::read_link(&path)?)?;
            }
            if !ft.is_file() {
                header.set_size(0);
            }
            header.set_cksum();
            sink.write_all(header.as_bytes())?;
        } else if ft.is_symlink() {
            fs::read_link(&path)?;
        }
        if ft.is_file() {
            let mut file = File::open(&path)?;
            let mut size = 0u64;
            loop {
                let n = file.read(buf)?;
                if n == 0 {
                    break;
                }
                if frame {
                    sink.write_all(&buf[..n])?;
                }
                size += n as u64;
            }
            if frame && !size.is_multiple_of(512) {
                sink.write_all(&[0u8; 512][..(512 - size % 512) as usize])?;
            }
            *bytes += size;
        }
        if ft.is_dir() {
            walk(&path, buf, frame, bytes)?;
        }
    }
    Ok(())
}

/// `f` over each 1 MiB piece of `path` (from the page cache).
fn each_chunk(path: &Path, mut f: impl FnMut(&mut [u8]) -> Result<()>) -> Result<u64> {
    let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        f(&mut buf[..n])?;
        total += n as u64;
    }
}

/// `f` over the whole AES blocks of each 1 MiB piece of `path`, in place (as the SEIPD
/// body is encrypted and decrypted).
fn each_block_run(path: &Path, mut f: impl FnMut(InOutBuf<'_, '_, aes::Block>)) -> Result<()> {
    each_chunk(path, |c| {
        let whole = c.len() / 16 * 16;
        let (blocks, _) = InOutBuf::from(&mut c[..whole]).into_chunks();
        f(blocks);
        Ok(())
    })
    .map(drop)
}

/// The digest `D` of all of `path` (thrown away: only its cost is wanted).
fn digest_all<D: Digest>(path: &Path) -> Result<()> {
    let mut h = D::new();
    each_chunk(path, |c| {
        h.update(&*c);
        Ok(())
    })?;
    std::hint::black_box(h.finalize());
    Ok(())
}

/// The XXH3-128 of all of `path` (a part's check and the verifier's fingerprint are the
/// same hash; thrown away: only its cost is wanted).
fn xxh3_128_all(path: &Path) -> Result<()> {
    let mut h = PartHasher::new(PartHashAlgo::Xxh3_128);
    each_chunk(path, |c| {
        h.update(c);
        Ok(())
    })?;
    std::hint::black_box(h.finish());
    Ok(())
}

/// Part-size files in `scratch`, one after another, each filled by `fill` (given the part
/// size, it says how many bytes it wrote; fewer ends it) and removed two parts later.
fn rolling_parts(
    scratch: &Path,
    mut fill: impl FnMut(&mut File, u64) -> Result<u64>,
) -> Result<()> {
    let name = |n: u64| scratch.join(format!("stages.part{n}"));
    let part_size = box_host::transfer::DEFAULT_PART_SIZE;
    let mut n = 0;
    loop {
        let mut part = File::create(name(n))?;
        let filled = fill(&mut part, part_size)?;
        if n >= 2 {
            fs::remove_file(name(n - 2))?;
        }
        if filled < part_size {
            break;
        }
        n += 1;
    }
    for left in n.saturating_sub(1)..=n {
        fs::remove_file(name(left))?;
    }
    Ok(())
}

/// hb's parts, in order, as one file (the plaintext of the backup: a .tar.zst).
fn join_parts(parts: &Path, out: &Path) -> Result<()> {
    let index = box_host::backup::save::read_index(parts)?;
    let mut joined = File::create(out)?;
    for part in &index.parts {
        io::copy(&mut File::open(parts.join(&part.name))?, &mut joined)?;
    }
    Ok(())
}

fn read_all(path: &Path) -> Result<()> {
    each_chunk(path, |_| Ok(())).map(drop)
}

pub fn run(data: &Path, parts: &Path, scratch: &Path) -> Result<()> {
    fs::create_dir_all(scratch)?;
    let zst = scratch.join("stages.tar.zst");
    let tar_path = scratch.join("stages.tar");
    join_parts(parts, &zst)?;
    // hb's own tar stream, for the compressor (untimed).
    zstd::stream::copy_decode(File::open(&zst)?, File::create(&tar_path)?)?;
    read_all(&zst)?;
    read_all(&tar_path)?;
    // Nothing dirty left for the kernel to write back during a timed stage (the files just
    // made are 2 GiB on the bench corpus).
    // SAFETY: sync(2) takes no arguments and cannot fail.
    unsafe { libc::sync() };
    let zst_bytes = fs::metadata(&zst)?.len();
    let tar_bytes = fs::metadata(&tar_path)?.len();

    let mut buf = vec![0u8; CHUNK];
    let mut read = 0u64;
    let walked = timed(|| walk(data, &mut buf, false, &mut read))?;
    report("walk + read the tree", read, &walked, 1);
    let mut framed_bytes = 0u64;
    let framed = timed(|| walk(data, &mut buf, true, &mut framed_bytes))?;
    let framing = Timed {
        wall: (framed.wall - walked.wall).max(0.0),
        cpu: (framed.cpu - walked.cpu).max(0.0),
    };
    report("tar framing", tar_bytes, &framing, 1);

    let compressed = timed(|| {
        let mut enc = zstd::stream::write::Encoder::new(io::sink(), 3)?;
        enc.include_checksum(true)?;
        // hb export's job shape (`box_proto::archive::compress`).
        compress::use_workers(&mut enc, 2)?;
        each_chunk(&tar_path, |c| Ok(enc.write_all(c)?))?;
        enc.finish()?;
        Ok(())
    })?;
    report("zstd -3, 2 workers", tar_bytes, &compressed, 1);

    let t = timed(|| xxh3_128_all(&zst))?;
    report("XXH3-128 (each part's check)", zst_bytes, &t, 2);

    let (key, iv) = ([7u8; 32], [0u8; 16]);
    let t = timed(|| {
        let mut cfb = cfb_mode::Encryptor::<Aes256>::new(&key.into(), &iv.into());
        each_block_run(&zst, |blocks| cfb.encrypt_blocks_inout_mut(blocks))
    })?;
    report("AES-256-CFB encrypt (alone)", zst_bytes, &t, 0);

    let t = timed(|| digest_all::<Sha1>(&zst))?;
    report("SHA-1, the MDC (alone)", zst_bytes, &t, 0);

    // The writer's pass: the two above, stitched as box runs them.
    let t = timed(|| {
        let mut cfb = cfb_mode::Encryptor::<Aes256>::new(&key.into(), &iv.into());
        let mut mdc = Sha1::new();
        each_chunk(&zst, |c| {
            let whole = c.len() / 16 * 16;
            for piece in c[..whole].chunks_mut(seipd::STITCH_ENCRYPT) {
                mdc.update(&*piece);
                let (blocks, _) = InOutBuf::from(piece).into_chunks();
                cfb.encrypt_blocks_inout_mut(blocks);
            }
            Ok(())
        })?;
        std::hint::black_box(mdc.finalize());
        Ok(())
    })?;
    report("AES-256-CFB encrypt + SHA-1, stitched", zst_bytes, &t, 1);

    let out = scratch.join("stages.write");
    // As box writes it: early writeback, and each range dropped from the page cache once
    // it is on the disk (box's verifier does that behind its reads), so that later writes
    // reuse those pages.
    let t = timed(|| {
        let file = File::create(&out)?;
        let mut w = box_host::backup::writeback::EarlyWriteback::new(file.try_clone()?);
        let mut behind = DropBehind::behind_a_writer();
        let mut written = 0;
        each_chunk(&zst, |c| {
            w.write_all(c)?;
            written += c.len() as u64;
            behind.read_up_to(&file, written);
            Ok(())
        })?;
        file.sync_all()?;
        Ok(())
    })?;
    report("write + fsync the backup", zst_bytes, &t, 1);
    fs::remove_file(&out)?;

    // hb's parts as a save has them: part-size files, each removed once the host has it,
    // two parts later (hb keeps two pending), so their pages are reused as in a save.
    let t = timed(|| {
        let mut plain = File::open(&zst)?;
        let mut buf = vec![0u8; CHUNK];
        rolling_parts(scratch, |part, size| {
            let mut filled = 0;
            while filled < size {
                let want = (size - filled).min(CHUNK as u64) as usize;
                let n = plain.read(&mut buf[..want])?;
                if n == 0 {
                    break;
                }
                part.write_all(&buf[..n])?;
                filled += n as u64;
            }
            Ok(filled)
        })
    })?;
    report("write the parts (hb, no fsync)", zst_bytes, &t, 1);

    let t = timed(|| {
        let mut plain = File::open(&zst)?;
        rolling_parts(scratch, |part, size| {
            Ok(io::copy(&mut (&mut plain).take(size), part)?)
        })
    })?;
    report("copy each part out", zst_bytes, &t, 1);

    let t = timed(|| {
        let mut cfb = cfb_mode::Decryptor::<Aes256>::new(&key.into(), &iv.into());
        each_block_run(&zst, |blocks| cfb.decrypt_blocks_inout_mut(blocks))
    })?;
    report("AES-256-CFB decrypt (alone)", zst_bytes, &t, 0);

    // The verifier's pass: decrypt and the MDC, stitched as box runs them.
    let t = timed(|| {
        let mut cfb = cfb_mode::Decryptor::<Aes256>::new(&key.into(), &iv.into());
        let mut mdc = Sha1::new();
        each_chunk(&zst, |c| {
            let whole = c.len() / 16 * 16;
            for piece in c[..whole].chunks_mut(seipd::STITCH_DECRYPT) {
                let (blocks, _) = InOutBuf::from(&mut *piece).into_chunks();
                cfb.decrypt_blocks_inout_mut(blocks);
                mdc.update(&*piece);
            }
            Ok(())
        })?;
        std::hint::black_box(mdc.finalize());
        Ok(())
    })?;
    report(
        "AES-256-CFB decrypt + SHA-1, stitched (verify)",
        zst_bytes,
        &t,
        1,
    );

    // The verifier also names the file it read: the SHA-256 a chain's next link and prune
    // know it by. A named temp (where the system has no unnamed files) is fingerprinted
    // too and read again before it is published: two more passes there, none here.
    let t = timed(|| digest_all::<Sha256>(&zst))?;
    report("SHA-256 of the backup (its name)", zst_bytes, &t, 1);
    let t = timed(|| xxh3_128_all(&zst))?;
    report("XXH3-128 fingerprint (a named temp's)", zst_bytes, &t, 0);

    let decoded = timed(|| {
        zstd::stream::copy_decode(File::open(&zst)?, io::sink())?;
        Ok(())
    })?;
    report("zstd decode (validate)", zst_bytes, &decoded, 1);
    let validated = timed(|| {
        validate::validate(File::open(&zst)?, &Limits::default())?;
        Ok(())
    })?;
    let rules = Timed {
        wall: (validated.wall - decoded.wall).max(0.0),
        cpu: (validated.cpu - decoded.cpu).max(0.0),
    };
    report("tar walk + rules (validate)", tar_bytes, &rules, 1);

    fs::remove_file(&zst)?;
    fs::remove_file(&tar_path)?;
    Ok(())
}
