#!/usr/bin/env python3
"""Give an ad hoc signed arm64 Mach-O a UUID derived from its own bytes, then re-hash the
code pages of its signature: scripts/release.sh runs this on the macOS `box`.

Why: zig's Mach-O linker computes LC_UUID before rustc strips the binary, from contents that
still name build paths, so two builds of one commit in different target dirs differ in those
16 bytes (and in the signature's hash of the page holding them), and nowhere else.

How, and why it is safe without a Mac: an ad hoc signature is a CodeDirectory of per-page
hashes with no cryptographic signature over it. Before changing anything, every stored code
page hash is recomputed from the file; if one differs from what the linker wrote, this
script has misunderstood the layout and stops, changing nothing. Then the UUID becomes the
first 16 bytes of SHA-256 over everything before the signature (with the UUID zeroed), and
the code page hashes are recomputed the same verified way. Running it twice changes nothing.

Usage: macho-stable-uuid.py FILE
"""

import hashlib
import struct
import sys

LC_UUID = 0x1B
LC_CODE_SIGNATURE = 0x1D
SUPERBLOB = 0xFADE0CC0
CODE_DIRECTORY = 0xFADE0C02
HASHES = {1: hashlib.sha1, 2: hashlib.sha256}


def fail(message):
    sys.exit(f"error: {sys.argv[1]}: {message}")


def load_commands(data):
    magic, _cpu, _sub, _ftype, ncmds = struct.unpack_from("<IiiII", data, 0)
    if magic != 0xFEEDFACF:
        fail("not a 64-bit little-endian Mach-O")
    off = 32
    for _ in range(ncmds):
        cmd, size = struct.unpack_from("<II", data, off)
        yield cmd, off
        off += size


def code_directories(data, sig_off):
    magic, _length, count = struct.unpack_from(">III", data, sig_off)
    if magic != SUPERBLOB:
        fail("the code signature is not a SuperBlob")
    for i in range(count):
        _type, blob_off = struct.unpack_from(">II", data, sig_off + 12 + 8 * i)
        if struct.unpack_from(">I", data, sig_off + blob_off)[0] == CODE_DIRECTORY:
            yield sig_off + blob_off


def page_hashes(data, cd):
    """(offset of each stored code slot, hash function, page size, code limit)."""
    (_magic, _len, _version, _flags, hash_offset, _ident, _special, n_code, code_limit,
     hash_size, hash_type, _platform, page_log2) = struct.unpack_from(">IIIIIIIIIBBBB", data, cd)
    if hash_type not in HASHES or HASHES[hash_type]().digest_size != hash_size:
        fail(f"unknown code directory hash type {hash_type}")
    page = 1 << page_log2
    if n_code != (code_limit + page - 1) // page:
        fail("code slot count does not match the code limit")
    return [cd + hash_offset + i * hash_size for i in range(n_code)], HASHES[hash_type], page, code_limit


def rehash(data, cd, write):
    slots, hasher, page, limit = page_hashes(data, cd)
    for i, slot in enumerate(slots):
        digest = hasher(bytes(data[i * page: min((i + 1) * page, limit)])).digest()
        if write:
            data[slot: slot + len(digest)] = digest
        elif data[slot: slot + len(digest)] != digest:
            fail(f"code page {i} hash differs from the linker's; not touching the signature")


def main():
    path = sys.argv[1]
    data = bytearray(open(path, "rb").read())
    uuid_at = sig_off = None
    for cmd, off in load_commands(data):
        if cmd == LC_UUID:
            uuid_at = off + 8
        elif cmd == LC_CODE_SIGNATURE:
            sig_off = struct.unpack_from("<I", data, off + 8)[0]
    if uuid_at is None or sig_off is None:
        fail("needs both LC_UUID and LC_CODE_SIGNATURE")
    cds = list(code_directories(data, sig_off))
    if not cds:
        fail("the code signature has no CodeDirectory")
    for cd in cds:
        rehash(data, cd, write=False)
    data[uuid_at: uuid_at + 16] = bytes(16)
    uuid = bytearray(hashlib.sha256(bytes(data[:sig_off])).digest()[:16])
    uuid[6] = (uuid[6] & 0x0F) | 0x30  # RFC 4122 name-based, as ld64 and lld mark theirs
    uuid[8] = (uuid[8] & 0x3F) | 0x80
    data[uuid_at: uuid_at + 16] = uuid
    for cd in cds:
        rehash(data, cd, write=True)
    for cd in cds:
        rehash(data, cd, write=False)
    with open(path, "r+b") as f:
        f.write(data)
    print(f"    Mach-O UUID {uuid.hex()} (from its contents), code pages re-hashed")


if __name__ == "__main__":
    main()
