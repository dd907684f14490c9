#!/usr/bin/env python3
"""The house check: no import runs from a module up to one above it, and no circle.

Reads every crate's own source (never runs or builds it) and builds two graphs of imports
from it, per crate:

* the FILE scale: one node per module file. An arrow A -> B means a file A names a module
  of file B: a `use` line, a path in code (`crate::lifecycle::containment::start_box(..)`
  in a body is an import too), `super::`/`self::` relative paths, a path through a name
  that a `use` brought in (`use crate::ui;` then `ui::progress::Bar`), or a child module's
  own name in its parent. A path is cut to the longest prefix that names a module; what
  follows is the item taken, printed as the arrow's names. `mod x;` (with `#[path]`)
  builds the module tree and is no arrow: a parent declaring its children imports nothing.
  A CIRCLE is a strongly connected component of two files or more (see below for the
  arrows that a module's front sends into its own subtree).
* the FOLDER scale: one room per entry of `src/` (`src/backup/` is one room, `src/cli.rs`
  another; `x.rs` with `x/` beside it is the room `x/`). Its arrows are the file arrows
  between rooms. An UPWARD arrow is one that runs from a lower room to a higher one: the
  rooms of each folder-scale circle are laid on floors so that the fewest imported names
  run back up (a minimum feedback arc set, weighted by names; ties go to fewer arrows),
  and the arrows left running up are the ones printed: the thin arrow against the grain is
  the one to move, not the many that hold the floors. The count is 0 exactly when the
  folders form no circle.

Up and down the module tree: a module taking what an ancestor defines (`use super::Thing`
in a child, `crate::Ctx` under the crate root) is an arrow up the tree, and counts at both
scales. A module reaching down into its own subtree (`pub use child::Thing` in a `mod.rs`,
a crate root calling `verbs::cp::run`) is an arrow too, but it closes no circle at the
file scale: a module's front handing on and calling what its own children define is how
Rust lays out a folder, so `a/mod.rs` <-> `a/b.rs` is no circle. A circle is children
looping among themselves, or through files outside their parent's subtree. At the folder
scale the crate root is a room like the others: where it defines what a folder takes and
also calls into that folder, one of the two arrows runs up.

Not read: `#[cfg(test)]` items, `#[test]` functions, modules named `tests` (test code may
reach anywhere), and `tests/`, `benches/`, `examples/` (they are no part of `src/`).
Comments and string literals are no imports (doc links included).

Usage: house.py [CRATE_DIR ...]   (default: every crate under crates/)
Prints each upward arrow and each circle with the file arrows that make it (paths under
the crate's `src/`, then the names taken), then per crate its count:

    box-host: upward smolvm/ -> base/
    box-host:   smolvm/driver.rs -> base/mod.rs (layers_present)
    box-host: circle gateway/nonce.rs, gateway/sign_in_file.rs
    box-host:   gateway/nonce.rs -> gateway/sign_in_file.rs (remove)
    box-host:   gateway/sign_in_file.rs -> gateway/nonce.rs (random_hex32)
    box-host: upward: 1, circles: 1

Exit 0 when every count is 0, 1 when one is not, 2 when a crate cannot be read (a module
without its file, a file that is not UTF-8, a literal or bracket that never closes).
"""

import os
import re
import sys
from pathlib import Path

# --------------------------------------------------------------------------------------
# Tokens: Rust source without comments, strings, chars and lifetimes that could look like
# paths. Only what the scan below needs is kept apart: identifiers, `::`, brackets, `;`.

IDENT, PUNCT, STRING, OTHER = "ident", "punct", "string", "other"


class SourceError(Exception):
    """A crate's source could not be read the way rustc would read it."""


def tokenize(text):
    """Returns [(kind, value)]: identifiers, `::`, single punctuation, and string literals
    (their value, for `#[path = "..."]`). Comments vanish; numbers, chars and lifetimes
    become OTHER so that nothing inside them reads as a path."""
    tokens = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            i = _skip_block_comment(text, i)
        elif c == '"':
            value, i = _read_string(text, i + 1)
            tokens.append((STRING, value))
        elif c == "r" and _raw_string_at(text, i + 1):
            value, i = _read_raw_string(text, i + 1)
            tokens.append((STRING, value))
        elif c in "bc" and i + 1 < n and text[i + 1] == '"':
            value, i = _read_string(text, i + 2)
            tokens.append((STRING, value))
        elif c in "bc" and text.startswith("r", i + 1) and _raw_string_at(text, i + 2):
            value, i = _read_raw_string(text, i + 2)
            tokens.append((STRING, value))
        elif c == "b" and i + 1 < n and text[i + 1] == "'":
            i = _skip_char_literal(text, i + 1)
            tokens.append((OTHER, "char"))
        elif c == "'":
            i = _skip_quote(text, i)
            tokens.append((OTHER, "'"))
        elif c == "r" and text.startswith("#", i + 1) and _ident_start(text, i + 2):
            end = _ident_end(text, i + 2)  # a raw identifier, r#type
            tokens.append((IDENT, text[i + 2 : end]))
            i = end
        elif _ident_start(text, i):
            end = _ident_end(text, i)
            tokens.append((IDENT, text[i:end]))
            i = end
        elif c.isdigit():
            i = _skip_number(text, i)
            tokens.append((OTHER, "number"))
        elif text.startswith("::", i):
            tokens.append((PUNCT, "::"))
            i += 2
        elif c == "$" and text.startswith("crate", i + 1) and not _ident_start(text, i + 6):
            tokens.append((IDENT, "$crate"))  # a macro's path to its own crate's root
            i += 6
        else:
            tokens.append((PUNCT, c))
            i += 1
    return tokens


def _ident_start(text, i):
    return i < len(text) and (text[i].isalpha() or text[i] == "_")


def _ident_end(text, i):
    while i < len(text) and (text[i].isalnum() or text[i] == "_"):
        i += 1
    return i


def _skip_block_comment(text, i):
    depth, i = 0, i
    while i < len(text):
        if text.startswith("/*", i):
            depth, i = depth + 1, i + 2
        elif text.startswith("*/", i):
            depth, i = depth - 1, i + 2
            if depth == 0:
                return i
        else:
            i += 1
    raise SourceError("a block comment never ends")


def _read_string(text, i):
    start = i
    while i < len(text):
        if text[i] == "\\":
            i += 2
        elif text[i] == '"':
            return text[start:i], i + 1
        else:
            i += 1
    raise SourceError("a string literal never ends")


def _raw_string_at(text, i):
    """True where `r` at i-1 opens a raw string: r"..." or r#..."...."#..."""
    j = i
    while j < len(text) and text[j] == "#":
        j += 1
    return j < len(text) and text[j] == '"'


def _read_raw_string(text, i):
    hashes = 0
    while text[i] == "#":
        hashes, i = hashes + 1, i + 1
    closing = '"' + "#" * hashes
    end = text.find(closing, i + 1)
    if end < 0:
        raise SourceError("a raw string literal never ends")
    return text[i + 1 : end], end + len(closing)


def _skip_char_literal(text, i):
    """From the opening quote of a char literal to past its closing quote."""
    j = i + 1
    if j < len(text) and text[j] == "\\":
        j += 2
    else:
        j += 1
    end = text.find("'", j)
    if end < 0:
        raise SourceError("a char literal never ends")
    return end + 1


def _skip_quote(text, i):
    """A quote opens either a char literal ('a', '\\n') or a lifetime or label ('a)."""
    if text.startswith("\\", i + 1) or text.startswith("'", i + 2):
        return _skip_char_literal(text, i)
    return _ident_end(text, i + 1) if _ident_start(text, i + 1) else i + 1


def _skip_number(text, i):
    i = _ident_end(text, i)  # 0x1F, 1_000u32, 1e10
    if text.startswith(".", i) and i + 1 < len(text) and text[i + 1].isdigit():
        i = _ident_end(text, i + 1)  # 1.5, but not the range 1..2 nor x.0.method
    return i


# --------------------------------------------------------------------------------------
# The scan of one file: what it declares (`mod x;`, inline `mod x { }`) and every path it
# names, each with the inline module it stands in (a tuple of names, () for the file's own).

OPEN, CLOSE = "([{", ")]}"
ITEM_KEYWORDS = {"fn", "struct", "enum", "union", "trait", "impl", "mod", "macro_rules"}


class FileScan:
    def __init__(self):
        self.mods = []  # (scope, name, path attribute or None, inline?)
        self.uses = []  # (scope, [(segments, alias or None, glob?)])
        self.paths = []  # (scope, segments)
        self.test_only = False  # a `#![cfg(test)]` at the top


def scan(tokens):
    result = FileScan()
    _Scanner(tokens, result).run()
    return result


class _Scanner:
    def __init__(self, tokens, result):
        self.t = tokens
        self.out = result
        self.scopes = []  # one entry per open `{`: the inline module it opens, or None

    def scope(self):
        return tuple(name for name in self.scopes if name is not None)

    def run(self):
        i, attrs = 0, []
        while i < len(self.t):
            kind, value = self.t[i]
            if value == "#" and kind == PUNCT:
                inner = self._is(i + 1, "!")
                start = i + 2 if inner else i + 1
                if self._is(start, "["):
                    end = self._matching(start)
                    attr = self.t[start + 1 : end]
                    if inner and _is_test_only(attr) and not self.scopes:
                        self.out.test_only = True
                    if not inner:
                        attrs.append((start + 1, end))
                    i = end + 1
                    continue
            if attrs:
                read = [self.t[lo:hi] for lo, hi in attrs]
                if any(_is_test_only(a) or _is_test_fn(a) for a in read):
                    i = self._item_end(i)
                    attrs = []
                    continue
                if kind == IDENT and value == "pub":
                    i = self._matching(i + 1) + 1 if self._is(i + 1, "(") else i + 1
                    continue  # the attributes before `pub` are the item's after it
                path_attr = _path_attribute(read)
                for lo, hi in attrs:
                    self._paths_between(lo, hi)  # `#[command(version = crate::version::LONG)]`
                attrs = []
            else:
                path_attr = None
            if kind == IDENT and value == "mod" and self._kind(i + 1) == IDENT:
                name = self.t[i + 1][1]
                if name == "tests":
                    i = self._item_end(i)
                    continue
                if self._is(i + 2, "{"):
                    self.out.mods.append((self.scope(), name, path_attr, True))
                    self.scopes.append(name)
                    i += 3
                    continue
                if self._is(i + 2, ";"):
                    self.out.mods.append((self.scope(), name, path_attr, False))
                    i += 3
                    continue
            if kind == IDENT and value == "use":
                i = self._use(i + 1)
                continue
            if kind == PUNCT and value == "{":
                self.scopes.append(None)
            elif kind == PUNCT and value == "}" and self.scopes:
                self.scopes.pop()
            elif kind == IDENT and self._is(i + 1, "::") and self._starts_path(i):
                i = self._path(i)
                continue
            i += 1

    # -- tokens ------------------------------------------------------------------------
    def _is(self, i, value):
        return i < len(self.t) and self.t[i][0] == PUNCT and self.t[i][1] == value

    def _kind(self, i):
        return self.t[i][0] if i < len(self.t) else None

    def _matching(self, i):
        depth = 0
        for j in range(i, len(self.t)):
            kind, value = self.t[j]
            if kind != PUNCT:
                continue
            if value in OPEN:
                depth += 1
            elif value in CLOSE:
                depth -= 1
                if depth == 0:
                    return j
        raise SourceError("a bracket never closes")

    def _starts_path(self, i):
        """Not the tail of a longer path, nor a method's turbofish (`x.collect::<T>()`)."""
        return i == 0 or self.t[i - 1] not in ((PUNCT, "::"), (PUNCT, "."))

    def _item_end(self, i):
        """The index just past the item, statement or field that starts at i: an item
        (fn, struct, impl, mod...) ends at its `;` or its closing `}`; anything else (const,
        static, use, let, an expression, a field) at its `;` or `,`, or before the `}` of
        the block it stands in."""
        is_item = False
        depth = 0
        j = i
        while j < len(self.t):
            kind, value = self.t[j]
            if depth == 0 and kind == IDENT and value in ITEM_KEYWORDS:
                is_item = True
            if kind == PUNCT:
                if value in OPEN:
                    depth += 1
                elif value in CLOSE:
                    depth -= 1
                    if depth < 0:
                        return j
                    if depth == 0 and value == "}" and (is_item or self._block_stmt(i, j)):
                        return j + 1
                elif depth == 0 and (value == ";" or (value == "," and not is_item)):
                    return j + 1
            j += 1
        return j

    def _block_stmt(self, i, j):
        """A statement that is a bare block, `#[cfg(test)] { ... }`."""
        return self._is(i, "{") and self._matching(i) == j

    # -- paths -------------------------------------------------------------------------
    def _paths_between(self, lo, hi):
        i = lo
        while i < hi:
            if self._kind(i) == IDENT and self._is(i + 1, "::") and self._starts_path(i):
                i = self._path(i)
            else:
                i += 1

    def _path(self, i):
        segments = [self.t[i][1]]
        i += 1
        while self._is(i, "::") and self._kind(i + 1) == IDENT:
            segments.append(self.t[i + 1][1])
            i += 2
        self.out.paths.append((self.scope(), segments))
        return i

    def _use(self, i):
        """Reads a use tree up to its `;`: every leaf as (segments, alias, glob?)."""
        leaves = []
        extern = self._is(i, "::")  # `use ::std::..`: an extern crate's path, never ours
        i = self._use_tree(i + 1 if extern else i, [], leaves)
        if leaves and not extern:
            self.out.uses.append((self.scope(), leaves))
        while i < len(self.t) and not self._is(i, ";"):
            i += 1
        return i + 1

    def _use_tree(self, i, prefix, leaves):
        segments = list(prefix)
        while self._kind(i) == IDENT:
            segments.append(self.t[i][1])
            i += 1
            if not self._is(i, "::"):
                break
            i += 1
        if self._is(i, "*"):
            leaves.append((segments, None, True))
            return i + 1
        if self._is(i, "{"):
            i += 1
            while not self._is(i, "}"):
                start = i
                i = self._use_tree(i, segments, leaves)
                if self._is(i, ","):
                    i += 1
                if i == start or i >= len(self.t):
                    raise SourceError("a use list holds what no use tree holds, or never closes")
            return i + 1
        alias = None
        if self.t[i - 1] == (IDENT, "self") and len(segments) > len(prefix):
            segments.pop()  # `a::{self}`: the module a itself
        if self._kind(i) == IDENT and self.t[i][1] == "as" and self._kind(i + 1) == IDENT:
            alias = self.t[i + 1][1]
            i += 2
        if segments:
            leaves.append((segments, alias, False))
        return i


def _is_test_only(attr):
    """True for `cfg(test)`, `cfg(all(test, ..))`: an item that only tests compile."""
    if not attr or attr[0] != (IDENT, "cfg"):
        return False
    predicate, _ = _cfg_predicate(attr, 2)
    return predicate


def _cfg_predicate(attr, i):
    """Whether the cfg predicate at i needs `test`, and the index past it."""
    if i >= len(attr) or attr[i][0] != IDENT:
        return False, i + 1
    name = attr[i][1]
    i += 1
    if i < len(attr) and attr[i] == (PUNCT, "="):
        return False, i + 2  # `feature = "x"`, `target_os = "linux"`
    if i < len(attr) and attr[i] == (PUNCT, "("):
        members = []
        i += 1
        while i < len(attr) and attr[i] != (PUNCT, ")"):
            member, i = _cfg_predicate(attr, i)
            members.append(member)
            if i < len(attr) and attr[i] == (PUNCT, ","):
                i += 1
        i += 1
        if name == "all":
            return any(members), i
        if name == "any":
            return bool(members) and all(members), i
        return False, i  # not(..): compiled outside tests too
    return name == "test", i


def _is_test_fn(attr):
    return attr == [(IDENT, "test")]


def _path_attribute(attrs):
    for attr in attrs:
        if (
            len(attr) == 3
            and attr[0] == (IDENT, "path")
            and attr[1] == (PUNCT, "=")
            and attr[2][0] == STRING
        ):
            return attr[2][1]
    return None


# --------------------------------------------------------------------------------------
# The module tree of a crate, from its roots (`src/lib.rs`, `src/main.rs`) down the `mod`
# declarations, as rustc finds the files.


class Module:
    def __init__(self, name, file, parent, children_dir, path_dir):
        self.name = name
        self.file = file  # the file that holds its code (an inline module: its parent's)
        self.parent = parent
        self.children_dir = children_dir  # where `mod x;` inside it looks for x.rs, x/mod.rs
        self.path_dir = path_dir  # what a `#[path]` on such a `mod x;` is relative to
        self.children = {}
        self.aliases = {}  # names a `use` brings in that name a module of this crate
        self.uses = []
        self.paths = []


class Crate:
    def __init__(self, crate_dir):
        self.dir = Path(crate_dir)
        self.src = self.dir / "src"
        self.name = _package_name(self.dir)
        self.roots = []  # Module per crate root: the library first
        self.files = set()  # every module file read (relative to src/)
        for root_name in ("lib.rs", "main.rs"):
            root_file = self.src / root_name
            if root_file.is_file():
                self.roots.append(self._load_root(root_file))
        if not self.roots:
            raise SourceError(f"{self.dir}: no src/lib.rs nor src/main.rs")

    def rel(self, file):
        return Path(os.path.relpath(file, self.src)).as_posix()

    def _load_root(self, file):
        root = Module("crate", file, None, file.parent, file.parent)
        self._load_file(root, file, ())
        return root

    def _load_file(self, module, file, loading):
        """Reads a module's file and, depth first, the files its `mod x;` lines name. False
        for a file that only tests compile (`#![cfg(test)]`)."""
        if file in loading:
            raise SourceError(f"{file}: a `#[path]` leads back to a file that declares it")
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise SourceError(f"{file}: cannot be read as UTF-8 source ({err})") from err
        try:
            found = scan(tokenize(text))
        except SourceError as err:
            raise SourceError(f"{file}: {err}") from err
        if found.test_only:
            return False
        self.files.add(self.rel(file))
        inline = {(): module}
        for scope, name, path_attr, is_inline in found.mods:
            parent = inline.get(scope)
            if parent is None:
                continue  # inside an inline module that is itself not read
            if is_inline:
                inner_dir = parent.children_dir / (path_attr if path_attr is not None else name)
                child = Module(name, parent.file, parent, inner_dir, inner_dir)
                parent.children[name] = child
                inline[scope + (name,)] = child
                continue
            child_file = self._child_file(parent, name, path_attr)
            children_dir = _children_dir(child_file, path_attr)
            child = Module(name, child_file, parent, children_dir, child_file.parent)
            if self._load_file(child, child_file, loading + (file,)):
                parent.children[name] = child
        for scope, leaves in found.uses:
            if scope in inline:
                inline[scope].uses.append(leaves)
        for scope, segments in found.paths:
            if scope in inline:
                inline[scope].paths.append(segments)
        return True

    def _child_file(self, parent, name, path_attr):
        if path_attr is not None:
            candidates = [parent.path_dir / path_attr]
        else:
            candidates = [parent.children_dir / f"{name}.rs", parent.children_dir / name / "mod.rs"]
        for candidate in candidates:
            if candidate.is_file():
                return candidate
        shown = " or ".join(str(c) for c in candidates)
        raise SourceError(f"{parent.file}: `mod {name};` names no file ({shown})")


def _children_dir(file, path_attr):
    """rustc: a mod.rs (or a file named by #[path]) keeps its children beside it; x.rs in x/."""
    if path_attr is not None or file.name == "mod.rs":
        return file.parent
    return file.parent / file.stem


def _package_name(crate_dir):
    try:
        manifest = (crate_dir / "Cargo.toml").read_text(encoding="utf-8")
    except OSError:
        return crate_dir.name
    in_package = False
    for line in manifest.splitlines():
        line = line.strip()
        if line.startswith("["):
            in_package = line == "[package]"
        elif in_package:
            found = re.match(r'name\s*=\s*"([^"]+)"', line)
            if found:
                return found.group(1)
    return crate_dir.name


# --------------------------------------------------------------------------------------
# Resolution: every use leaf and path to the module file it names.


def all_modules(module):
    yield module
    for child in module.children.values():
        yield from all_modules(child)


def file_arrows(crate):
    """{(from file, to file): names taken}, both relative to src/, never a file to itself.
    A `use` of a module itself (`use crate::ui;`) names that module only where nothing
    taken through it is seen."""
    lib_name = crate.name.replace("-", "_")
    lib_root = crate.roots[0] if (crate.src / "lib.rs").is_file() else None
    items, modules_named = {}, {}

    def add(module, target, rest, segments, glob=False):
        source, dest = crate.rel(module.file), crate.rel(target.file)
        if source == dest:
            return
        if glob and not rest:
            items.setdefault((source, dest), set()).add("*")
        elif rest:
            items.setdefault((source, dest), set()).add(rest[0])
        else:
            modules_named.setdefault((source, dest), set()).add(segments[-1])

    for root in crate.roots:
        externs = {lib_name: lib_root} if lib_root is not None and root is not lib_root else {}
        modules = list(all_modules(root))
        _learn_aliases(modules, root, externs)
        for module in modules:
            for leaves in module.uses:
                for segments, _alias, glob in leaves:
                    target, rest = _resolve(module, segments, root, externs)
                    if target is not None:
                        add(module, target, rest, segments, glob)
            for segments in module.paths:
                target, rest = _resolve(module, segments, root, externs)
                if target is not None:
                    add(module, target, rest, segments)
    return {pair: items.get(pair) or modules_named[pair] for pair in {*items, *modules_named}}


def _learn_aliases(modules, root, externs):
    """The names each module's `use` lines give to modules of this crate; a use may name
    a module through another use (`use crate::ui; use ui::progress;`), so until none is
    learned. The first use of a name keeps it: of two that cfg chooses between (`use
    crate::linux as imp;`, `use crate::mac as imp;`) both are arrows, the first is followed."""
    learned = True
    while learned:
        learned = False
        for module in modules:
            for leaves in module.uses:
                for segments, alias, glob in leaves:
                    name = alias or segments[-1]
                    if glob or name == "_" or name in module.aliases:
                        continue
                    target, rest = _resolve(module, segments, root, externs)
                    if target is not None and not rest:
                        module.aliases[name] = target
                        learned = True


def _resolve(module, segments, root, externs):
    """The module that the longest module prefix of the path names, and what follows it;
    (None, ..) for a path that does not start in this crate."""
    first = segments[0]
    if first in ("crate", "$crate"):
        current = root
    elif first == "self":
        current = module
    elif first == "super":
        current = module.parent
    elif first in module.children:
        current = module.children[first]
    elif first in module.aliases:
        current = module.aliases[first]
    elif first in externs:
        current = externs[first]
    else:
        return None, segments
    i = 1
    while current is not None and i < len(segments):
        name = segments[i]
        if name == "super":
            current = current.parent
        elif name == "self":
            pass
        elif name in current.children:
            current = current.children[name]
        else:
            break
        i += 1
    if current is None:
        return None, segments  # `super` above the crate root: not a path of this crate
    return current, segments[i:]


# --------------------------------------------------------------------------------------
# Graphs: circles (strongly connected components) and the fewest names that run back up.


def strongly_connected(nodes, edges):
    """Tarjan's algorithm without recursion: the components, each a sorted list."""
    successors = {node: sorted(b for a, b in edges if a == node) for node in nodes}
    index, low, on_stack, stack, components = {}, {}, set(), [], []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, 0)]
        while work:
            node, child_i = work.pop()
            if child_i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            followers = successors[node]
            if child_i < len(followers):
                work.append((node, child_i + 1))
                nxt = followers[child_i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return components


EXACT_LIMIT = 12  # rooms in one folder circle up to which the best floors are searched whole


def upward_arrows(component, weights):
    """The arrows of one circle that run back up when its rooms are laid on floors so that
    the fewest names do (ties: the fewest arrows). An arrow a -> b runs up when b stands
    higher than a. Exact up to EXACT_LIMIT rooms (a search over every subset); above that,
    a greedy order (sinks low, sources high, then highest the room whose names going out
    outweigh those coming in most), which can leave more than the fewest running up."""
    if len(component) <= EXACT_LIMIT:
        order = _best_order(component, weights)
    else:
        order = _greedy_order(component, weights)
    floor = {room: i for i, room in enumerate(order)}
    return sorted((a, b) for (a, b) in weights if a in floor and b in floor and floor[b] > floor[a])


def _best_order(rooms, weights):
    """The rooms from the ground floor up. Laying a room on top of a set of rooms costs the
    names those below take from it; the cheapest way to lay each set is kept."""
    n = len(rooms)
    taken_from = [  # [room]: (bit of a room that takes from it, names taken)
        [(1 << i, weights[(a, b)]) for i, a in enumerate(rooms) if (a, b) in weights]
        for b in rooms
    ]
    best = [None] * (1 << n)  # [set of rooms laid]: ((names up, arrows up), room on top)
    best[0] = ((0, 0), None)
    for laid in range(1 << n):  # ascending: every set comes after its own subsets
        (names, arrows), _ = best[laid]
        for j in range(n):
            if laid & (1 << j):
                continue
            cost = (names, arrows)
            for bit, weight in taken_from[j]:
                if laid & bit:
                    cost = (cost[0] + weight, cost[1] + 1)
            grown = laid | (1 << j)
            if best[grown] is None or cost < best[grown][0]:
                best[grown] = (cost, j)
    order, laid = [], (1 << n) - 1
    while laid:
        top = best[laid][1]
        order.append(rooms[top])
        laid &= ~(1 << top)
    return order[::-1]


def _greedy_order(rooms, weights):
    """The rooms from the ground floor up, as the greedy heuristic of Eades, Lin and Smyth
    lays them: what takes nothing goes low, what nothing takes goes high, and else the room
    whose names going out outweigh those coming in most goes on top."""
    left = set(rooms)
    low, high = [], []
    while left:
        sinks = sorted(r for r in left if not any(weights.get((r, o)) for o in left if o != r))
        if sinks:
            low += sinks
            left -= set(sinks)
            continue
        sources = sorted(r for r in left if not any(weights.get((o, r)) for o in left if o != r))
        if sources:
            high = sources + high
            left -= set(sources)
            continue

        def balance(r):
            out = sum(weights.get((r, o), 0) for o in left)
            into = sum(weights.get((o, r), 0) for o in left)
            return (out - into, r)

        top = max(left, key=balance)
        high = [top] + high
        left.discard(top)
    return low + high


# --------------------------------------------------------------------------------------
# The house of one crate.


def room_of(crate, file):
    """The folder-scale room of a file (relative to src/): `backup/`, `cli.rs`; a top-level
    `x.rs` with an `x/` of modules beside it is the room `x/`."""
    first, _, rest = file.partition("/")
    if rest:
        return first + "/"
    stem = first[:-3] if first.endswith(".rs") else first
    if any(f.startswith(stem + "/") for f in crate.files):
        return stem + "/"
    return first


def descendant_pairs(crate):
    """(ancestor file, descendant file) for every module below another in the tree, through
    inline modules too: the direction in which a folder's front reaches its own rooms."""
    pairs = set()
    for root in crate.roots:
        for module in all_modules(root):
            for below in all_modules(module):
                if below.file != module.file:
                    pairs.add((crate.rel(module.file), crate.rel(below.file)))
    return pairs


class House:
    def __init__(self, crate):
        self.crate = crate
        self.arrows = file_arrows(crate)
        downward_in_tree = descendant_pairs(crate)
        self.circle_arrows = {p: n for p, n in self.arrows.items() if p not in downward_in_tree}
        self.circles = [
            c for c in strongly_connected(crate.files, set(self.circle_arrows)) if len(c) > 1
        ]
        self.room_arrows = {}  # (from room, to room): {(from file, to file): names}
        for (a, b), names in self.arrows.items():
            rooms = (room_of(crate, a), room_of(crate, b))
            if rooms[0] != rooms[1]:
                self.room_arrows.setdefault(rooms, {})[(a, b)] = names
        weights = {
            rooms: sum(len(names) for names in files.values())
            for rooms, files in self.room_arrows.items()
        }
        all_rooms = {room_of(crate, f) for f in crate.files}
        self.upward = []
        for component in strongly_connected(all_rooms, set(weights)):
            if len(component) > 1:
                self.upward += upward_arrows(component, weights)
        self.upward.sort()

    def report(self):
        name = self.crate.name

        def arrow_lines(arrows):
            return [
                f"{name}:   {a} -> {b} ({', '.join(sorted(names))})"
                for (a, b), names in sorted(arrows)
            ]

        lines = []
        for rooms in self.upward:
            lines.append(f"{name}: upward {rooms[0]} -> {rooms[1]}")
            lines += arrow_lines(self.room_arrows[rooms].items())
        for circle in self.circles:
            lines.append(f"{name}: circle {', '.join(circle)}")
            members = set(circle)
            lines += arrow_lines(
                (pair, names)
                for pair, names in self.circle_arrows.items()
                if pair[0] in members and pair[1] in members
            )
        lines.append(f"{name}: upward: {len(self.upward)}, circles: {len(self.circles)}")
        return lines

    def clean(self):
        return not self.upward and not self.circles


def default_crates():
    crates_dir = Path(__file__).resolve().parent.parent / "crates"
    return sorted(
        p for p in crates_dir.iterdir() if (p / "Cargo.toml").is_file() and (p / "src").is_dir()
    )


def main(argv):
    if argv in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    options = [arg for arg in argv if arg.startswith("-")]
    if options:
        print(f"house: unknown option {options[0]!r}; usage: house.py [CRATE_DIR ...]",
              file=sys.stderr)
        return 2
    crate_dirs = [Path(arg) for arg in argv] or default_crates()
    clean = True
    for crate_dir in crate_dirs:
        try:
            house = House(Crate(crate_dir))
        except SourceError as err:
            print(f"house: {err}", file=sys.stderr)
            return 2
        print("\n".join(house.report()))
        clean = clean and house.clean()
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
