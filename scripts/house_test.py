#!/usr/bin/env python3
"""Tests of scripts/house.py, run as a user runs it (`python3 scripts/house_test.py`): each
builds a tiny crate in a temporary directory, runs the script on it and reads what it
prints and how it exits."""

import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

HOUSE = Path(__file__).resolve().parent / "house.py"
REPO = HOUSE.parent.parent


def run_house(*args):
    return subprocess.run(
        [sys.executable, str(HOUSE), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
    )


class FakeCrate:
    """A crate named `fake`: {path under src/: Rust source}."""

    def __init__(self, test, files):
        tmp = tempfile.TemporaryDirectory()
        test.addCleanup(tmp.cleanup)
        self.dir = Path(tmp.name) / "fake"
        (self.dir / "src").mkdir(parents=True)
        (self.dir / "Cargo.toml").write_text('[package]\nname = "fake"\nversion = "0.1.0"\n')
        for path, source in files.items():
            file = self.dir / "src" / path
            file.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(source, bytes):
                file.write_bytes(source)
            else:
                file.write_text(textwrap.dedent(source))

    def house(self):
        return run_house(self.dir)


# `high/` stands on `low.rs`: it takes two names from it.
LAYERED = {
    "lib.rs": "pub mod high;\npub mod low;\n",
    "low.rs": """
        pub struct Thing;
        pub fn size() -> usize { 1 }
    """,
    "high/mod.rs": "pub mod a;\npub mod b;\n",
    "high/a.rs": "pub fn run() {}\n",
    "high/b.rs": """
        use crate::low::{size, Thing};
        pub fn make() -> (Thing, usize) { (Thing, size()) }
    """,
}


def layered_with(low_extra):
    return {**LAYERED, "low.rs": LAYERED["low.rs"] + textwrap.dedent(low_extra)}


class HouseTest(unittest.TestCase):
    def assertPrints(self, done, lines, returncode):
        """What the user reads, line by line, and how the check exits."""
        self.assertEqual(done.stdout.splitlines(), lines, done.stderr)
        self.assertEqual(done.returncode, returncode, done.stderr)


class CleanHouse(HouseTest):
    def test_a_layered_crate_passes(self):
        done = FakeCrate(self, LAYERED).house()
        self.assertPrints(done, ["fake: upward: 0, circles: 0"], 0)

    def test_a_parent_and_its_children_are_no_circle(self):
        # mod.rs hands on and calls what its child defines; the child takes its parent's
        # type: how Rust lays out a folder, not a tangle.
        crate = FakeCrate(
            self,
            {
                "lib.rs": "pub mod a;\n",
                "a/mod.rs": """
                    mod b;
                    pub use b::B;
                    pub struct T;
                    pub fn make() -> B { b::build(T) }
                """,
                "a/b.rs": """
                    use super::T;
                    pub struct B;
                    pub fn build(_: T) -> B { B }
                """,
            },
        )
        done = crate.house()
        self.assertPrints(done, ["fake: upward: 0, circles: 0"], 0)

    def test_test_code_comments_and_strings_are_no_imports(self):
        # Each of these reaches from low.rs up into high/, which stands on low.rs: read as
        # an import, any one of them would make an upward arrow and a circle.
        crate = FakeCrate(
            self,
            {
                **layered_with(
                    """
                    // crate::high::a::run();
                    /* crate::high::a::run(); /* nested */ crate::high::a::run(); */
                    /// Not the [`runner`](crate::high::a::run).
                    pub fn words() -> (&'static str, &'static str, char) {
                        ("crate::high::a::run()", r#"a "quoted" crate::high::a::run"#, '"')
                    }

                    #[cfg(test)]
                    fn helper() { crate::high::a::run(); }

                    #[cfg(all(test, target_os = "linux"))]
                    use crate::high::a::run;

                    #[cfg(test)]
                    mod fixtures;
                    mod only_in_tests;

                    mod tests {
                        use crate::high::a::run;
                    }
                    """
                ),
                "low/fixtures.rs": "use crate::high::b::make;\n",
                "low/only_in_tests.rs": "#![cfg(test)]\nuse crate::high::b::make;\n",
            },
        )
        done = crate.house()
        self.assertPrints(done, ["fake: upward: 0, circles: 0"], 0)


class UpwardArrows(HouseTest):
    def test_a_path_in_a_body_up_to_a_higher_room_is_reported(self):
        # low.rs calls into high/, which takes two names from low.rs: the one name going
        # the other way is the arrow that runs up. No two files import each other.
        crate = FakeCrate(
            self, layered_with("pub fn start() { crate::high::a::run(); }\n")
        )
        done = crate.house()
        self.assertPrints(
            done,
            [
                "fake: upward low.rs -> high/",
                "fake:   low.rs -> high/a.rs (run)",
                "fake: upward: 1, circles: 0",
            ],
            1,
        )

    def test_paths_past_quotes_lifetimes_and_in_inline_modules_are_read(self):
        crate = FakeCrate(
            self,
            layered_with(
                """
                pub mod inner {
                    pub fn start<'a>(label: &'a str) -> (char, &'a str) {
                        let quote = '"';
                        let escaped = '\\'';
                        let _ = (escaped, b'"', "\\"");
                        super::super::high::a::run();
                        (quote, label)
                    }
                }
                """
            ),
        )
        done = crate.house()
        self.assertIn("fake:   low.rs -> high/a.rs (run)", done.stdout.splitlines())
        self.assertEqual(done.returncode, 1)

    def test_a_path_in_an_attribute_is_read_unless_the_item_is_for_tests(self):
        crate = FakeCrate(
            self,
            layered_with(
                """
                #[command(version = crate::high::a::VERSION)]
                pub struct Args;

                #[command(about = crate::high::a::ABOUT)]
                #[cfg(test)]
                pub struct TestArgs;
                """
            ),
        )
        self.assertPrints(
            crate.house(),
            [
                "fake: upward low.rs -> high/",
                "fake:   low.rs -> high/a.rs (VERSION)",
                "fake: upward: 1, circles: 0",
            ],
            1,
        )

    def test_an_item_compiled_outside_tests_is_read(self):
        for cfg in ("not(test)", 'any(test, feature = "x")', 'target_os = "linux"'):
            with self.subTest(cfg=cfg):
                crate = FakeCrate(
                    self,
                    layered_with(f"#[cfg({cfg})]\nuse crate::high::a::run;\n"),
                )
                done = crate.house()
                self.assertIn("fake: upward low.rs -> high/", done.stdout.splitlines())
                self.assertEqual(done.returncode, 1)

    def test_a_path_attribute_and_a_used_module_name_lead_to_their_files(self):
        # gen/odd_name.rs is found by #[path]; `low::deep::f` goes through `use crate::low`
        # to low/deep.rs, not to low/mod.rs.
        crate = FakeCrate(
            self,
            {
                "lib.rs": 'pub mod low;\n#[path = "gen/odd_name.rs"]\npub mod odd;\n',
                "low/mod.rs": "pub mod deep;\n",
                "low/deep.rs": """
                    pub fn f() {}
                    pub const K: u8 = 1;
                    pub fn back() { crate::odd::g() }
                """,
                "gen/odd_name.rs": """
                    use crate::low;
                    pub fn g() {}
                    pub fn h() -> u8 { low::deep::f(); low::deep::K }
                """,
            },
        )
        done = crate.house()
        self.assertPrints(
            done,
            [
                "fake: upward low/ -> gen/",
                "fake:   low/deep.rs -> gen/odd_name.rs (g)",
                "fake: circle gen/odd_name.rs, low/deep.rs",
                "fake:   gen/odd_name.rs -> low/deep.rs (K, f)",
                "fake:   low/deep.rs -> gen/odd_name.rs (g)",
                "fake: upward: 1, circles: 1",
            ],
            1,
        )

    def test_a_circle_of_many_rooms_reports_its_lightest_arrow(self):
        # 13 rooms in a ring, more than the exact search takes: every room takes two names
        # from the next but one, which takes one; that one arrow is what runs up.
        files = {"lib.rs": "".join(f"pub mod r{i:02};\n" for i in range(13))}
        for i in range(13):
            taken = "f" if i == 7 else "{f, g}"
            following = f"r{(i + 1) % 13:02}"
            files[f"r{i:02}.rs"] = (
                f"use crate::{following}::{taken};\npub fn f() {{}}\npub fn g() {{}}\n"
            )
        done = FakeCrate(self, files).house()
        lines = done.stdout.splitlines()
        self.assertIn("fake: upward r07.rs -> r08.rs", lines)
        self.assertEqual(lines[-1], "fake: upward: 1, circles: 1")
        self.assertEqual(done.returncode, 1)


class Circles(HouseTest):
    def test_two_files_that_import_each_other_are_a_circle(self):
        crate = FakeCrate(
            self,
            {
                "lib.rs": "pub mod a;\n",
                "a/mod.rs": "pub mod x;\npub mod y;\n",
                "a/x.rs": """
                    use crate::a::{y::{helper, Other as _Other}};
                    pub struct G;
                    pub fn go() { helper(); }
                """,
                "a/y.rs": """
                    pub struct Other;
                    pub fn helper() -> super::x::G { super::x::G }
                """,
            },
        )
        done = crate.house()
        self.assertPrints(
            done,
            [
                "fake: circle a/x.rs, a/y.rs",
                "fake:   a/x.rs -> a/y.rs (Other, helper)",
                "fake:   a/y.rs -> a/x.rs (G)",
                "fake: upward: 0, circles: 1",
            ],
            1,
        )

    def test_a_child_looping_through_its_parent_and_an_outside_file_is_a_circle(self):
        crate = FakeCrate(
            self,
            {
                "lib.rs": "pub mod a;\npub mod c;\n",
                "a/mod.rs": "pub mod b;\npub struct T;\npub fn f() { crate::c::g() }\n",
                "a/b.rs": "use super::T;\npub struct B(pub T);\n",
                "c.rs": "pub fn g() { let _ = crate::a::b::B; }\n",
            },
        )
        done = crate.house()
        self.assertIn("fake: circle a/b.rs, a/mod.rs, c.rs", done.stdout.splitlines())
        self.assertEqual(done.returncode, 1)


class BadInput(HouseTest):
    def test_a_crate_that_cannot_be_read_is_an_error_not_a_pass(self):
        cases = {
            "a module without its file": ({"lib.rs": "mod gone;\n"}, "`mod gone;` names no file"),
            "a file that is not UTF-8": (
                {"lib.rs": "mod latin;\n", "latin.rs": b"// caf\xe9\n"},
                "latin.rs: cannot be read as UTF-8",
            ),
            "a string that never ends": ({"lib.rs": 'const S: &str = "open;\n'}, "never ends"),
            "a bracket that never closes": (
                {"lib.rs": "#[derive(Debug\nstruct S;\n"},
                "never closes",
            ),
            "a use list that is no use list": (
                {"lib.rs": "pub mod a;\nuse crate::{a, #b};\n", "a.rs": ""},
                "a use list holds what no use tree holds",
            ),
            "no crate root": ({"util.rs": "pub fn f() {}\n"}, "no src/lib.rs nor src/main.rs"),
        }
        for what, (files, said) in cases.items():
            with self.subTest(what):
                done = FakeCrate(self, files).house()
                self.assertEqual(done.returncode, 2, done.stdout)
                self.assertIn(said, done.stderr)
                self.assertNotIn("upward:", done.stdout)

    def test_an_unknown_option_is_a_usage_error(self):
        done = run_house("--fix")
        self.assertEqual(done.returncode, 2)
        self.assertIn("unknown option '--fix'", done.stderr)


class TheRepository(HouseTest):
    def test_every_crate_of_the_repository_is_read_and_counted(self):
        done = run_house()
        self.assertIn(done.returncode, (0, 1), done.stderr)
        summaries = [line for line in done.stdout.splitlines() if ": upward: " in line]
        crates = sorted(p.name for p in (REPO / "crates").iterdir() if (p / "src").is_dir())
        self.assertEqual([line.split(":")[0] for line in summaries], crates)
        all_clean = all(line.endswith(": upward: 0, circles: 0") for line in summaries)
        self.assertEqual(done.returncode == 0, all_clean)


if __name__ == "__main__":
    unittest.main()
