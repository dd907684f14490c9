# Builds the hostile archive corpus (the seed's own test cases and more; the rules are in
# docs/backup-format.md, "The validator's rules") as plain tar files.
# Usage: python3 hostile.py OUTDIR. Each archive is OUTDIR/<case>.tar; one line per case on
# stdout: "<case>\t<expected reason>".
import io, os, sys, tarfile

out = sys.argv[1]

def ti(name, kind=tarfile.REGTYPE, link="", data=b"", mode=0o644):
    t = tarfile.TarInfo(name)
    t.type = kind
    t.linkname = link
    t.mode = mode
    t.mtime = 1_700_000_000
    if kind == tarfile.REGTYPE:
        t.size = len(data)
    if kind == tarfile.DIRTYPE:
        t.mode = 0o755
    return t, (data if kind == tarfile.REGTYPE else None)

def base():
    return [ti("./", tarfile.DIRTYPE), ti("./home/", tarfile.DIRTYPE), ti("./home/agent/", tarfile.DIRTYPE)]

F = lambda name, data=b"x": ti(name, tarfile.REGTYPE, data=data)
L = lambda name, target: ti(name, tarfile.SYMTYPE, target)
H = lambda name, target: ti(name, tarfile.LNKTYPE, target)
D = lambda name: ti(name, tarfile.DIRTYPE)

cases = {
    # The seed's eleven hostile-archive tests, in its order, less the five it refused for
    # where a symlink points (a symlink is data now: see `kept` below) and with what a
    # restore still refuses.
    "hardlink-dotdot": (base() + [H("./home/agent/h", "../../escape")], "archive hardlink target is not a member name"),
    "fifo": (base() + [ti("./home/agent/fifo", tarfile.FIFOTYPE)], "device, FIFO, socket"),
    "home-agent-symlink-to-root": ([D("./"), D("./home/"), L("./home/agent", "/")], "home/agent must be a real directory"),
    "root-symlink": ([L("./", "home")] + base()[1:], "archive root member must be a real directory"),
    "root-hardlink": ([H(".", "home/agent/f")] + base()[1:] + [F("./home/agent/f")], "archive root member must be a real directory"),
    "linked-parent-alias": (base() + [L("./home/agent/up", ".."), L("./home/agent/up/home", "..")], "archive member is nested beneath a link"),
    "file-beneath-linked-parent": (base() + [L("./home/agent/up", ".."), F("./home/agent/up/owned")], "archive member is nested beneath a link"),
    "file-beneath-absolute-link": (base() + [L("./home/agent/etc", "/etc"), F("./home/agent/etc/passwd")], "archive member is nested beneath a link"),
    "file-beneath-hardlink": (base() + [F("./home/agent/f"), H("./home/agent/h", "home/agent/f"), F("./home/agent/h/x")], "archive member is nested beneath a link"),
    # The rest of the seed's list and of its nine rules.
    "missing-home-agent": ([D("./"), D("./home/"), D("./logs/"), F("./logs/x")], "home/agent must be a real directory"),
    "missing-home": ([D("./"), D("./logs/")], "home must be a real directory"),
    "home-symlink": ([D("./"), L("./home", "/home"), D("./logs/")], "home must be a real directory"),
    "absolute-path": (base() + [F("/tmp/escape")], "archive path escapes its extraction root"),
    "dotdot-path": (base() + [F("../unsafe")], "archive path escapes its extraction root"),
    "dotdot-inside": (base() + [F("./home/agent/../../x")], "archive path escapes its extraction root"),
    "control-char": (base() + [F("./home/agent/bad\x01name")], "contains control characters"),
    "control-char-in-hardlink": (base() + [F("./home/agent/f"), H("./home/agent/h", "home/agent/f\x1b")], "contains control characters"),
    "del-char": (base() + [F("./home/agent/bad\x7fname")], "contains control characters"),
    "duplicate": (base() + [F("./home/agent/f"), F("home/agent/f")], "archive contains duplicate path: home/agent/f"),
    "char-device": (base() + [ti("./home/agent/null", tarfile.CHRTYPE)], "device, FIFO, socket"),
    "block-device": (base() + [ti("./home/agent/sda", tarfile.BLKTYPE)], "device, FIFO, socket"),
    "hardlink-to-dir": (base() + [H("./home/agent/h", "home/agent")], "archive hardlink does not resolve to a regular file"),
    "hardlink-to-symlink": (base() + [F("./home/agent/f"), L("./home/agent/l", "f"), H("./home/agent/h", "home/agent/l")], "archive hardlink does not resolve to a regular file"),
    "hardlink-before-target": (base() + [H("./home/agent/h", "home/agent/f"), F("./home/agent/f")], "archive hardlink comes before its target"),
    "hardlink-absolute": (base() + [H("./home/agent/h", "/etc/shadow")], "archive hardlink target is not a member name"),
    "hardlink-through-symlink": (base() + [D("./home/agent/d/"), F("./home/agent/d/f"), L("./home/agent/l", "d"), H("./home/agent/h", "home/agent/l/f")], "archive hardlink comes before its target"),
    "through-file": (base() + [F("./home/agent/f"), F("./home/agent/f/x")], "archive member parent is not a directory"),
    "empty-link-target": (base() + [L("./home/agent/l", "")], "archive link target is empty"),
    "parent-missing": (base() + [F("./home/agent/nodir/x")], "resolves through missing or non-directory member"),
    "empty": ([], "archive is empty"),
}

# Symlinks the seed refused for where they point, kept as data now (GNU tar, restic and borg
# keep them): each must validate, and extract to a link with exactly its target.
kept = {
    "symlink-absolute": base() + [L("./home/agent/esc", "/tmp/escape")],
    "symlink-dotdot-from-home": base() + [L("./home/up", "../../")],
    "symlink-cycle": base() + [L("./home/agent/first", "second"), L("./home/agent/second", "first")],
    "pivot": base() + [L("./home/agent/up", "../.."), L("./home/agent/x", "up/../victim")],
    "symlink-to-missing": base() + [L("./home/agent/l", "nothere")],
    "symlink-through-file": base() + [F("./home/agent/f"), L("./home/agent/l", "f/x")],
    "control-char-in-link": base() + [L("./home/agent/l", "a\x1bb")],
}
def write_case(name, members, reason):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    with open(os.path.join(out, name + ".tar"), "wb") as f:
        f.write(buf.getvalue())
    print(f"{name}\t{reason}")

for name, members in kept.items():
    write_case(name, members, "KEPT")
for name, (members, reason) in cases.items():
    write_case(name, members, reason)

# A PAX global header bomb: 1 MiB of global records, then 20,000 members, each of which
# used to get its own copy of them (~100 MB of such archive cost hours of CPU).
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT,
                  pax_headers={"comment": "c" * (1 << 20)}) as tf:
    for info, data in base() + [F(f"./home/agent/f{i}", b"") for i in range(20000)]:
        tf.addfile(info, io.BytesIO(data) if data is not None else None)
with open(os.path.join(out, "pax-global-bomb.tar"), "wb") as f:
    f.write(buf.getvalue())
print("pax-global-bomb\tarchive has too many or too large PAX global headers")

# The corpus that must pass: probe.txt, a relative symlink and a hardlink to it.
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
    for info, data in base() + [D("./home/agent/workspace/"), F("./home/agent/workspace/probe.txt", b"probe\n"),
                                L("./home/agent/workspace/probe-link", "probe.txt"),
                                H("./home/agent/workspace/probe-hard", "./home/agent/workspace/probe.txt")]:
        tf.addfile(info, io.BytesIO(data) if data is not None else None)
with open(os.path.join(out, "GOOD.tar"), "wb") as f:
    f.write(buf.getvalue())
