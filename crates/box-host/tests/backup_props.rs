//! Property: export → encrypt (save pipeline: validate, verify, publish) → extract
//! reproduces arbitrary generated trees. Few cases: every case pays four passphrase
//! derivations (S2K), which are slow in debug builds; hb-guest's export_import test runs the
//! same generator through export → import without encryption for many more cases.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;
#[path = "../../hb-guest/tests/export_import_support/mod.rs"]
mod trees;

use backup_support::{PASS, export, secret};
use box_host::backup::{load, save};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 3, ..ProptestConfig::default() })]

    #[test]
    fn export_encrypt_extract_reproduces_generated_trees(nodes in trees::nodes()) {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        trees::build(&src, &nodes);
        let parts = t.path().join("parts");
        export(&src, &parts, 5000);
        let out = t.path().join("b/x-20261129-120000.tar.zst.gpg");
        let pass = secret(PASS);
        let mut p = save::Pipeline::begin(&out, &pass).unwrap();
        p.feed_parts_dir(&parts).unwrap();
        match p.finish() {
            Ok(sealed) => {
                sealed.verify(&pass).unwrap().publish().unwrap();
                let v = load::validate_backup(&out, &pass).unwrap();
                let target = t.path().join("out");
                load::extract(&v, &pass, &target).unwrap();
                prop_assert_eq!(trees::snapshot(&target), trees::snapshot(&src));
            }
            Err(e) => {
                // Only trees with dangling or escaping symlinks may be refused, and then
                // nothing is published.
                let msg = format!("{e:#}");
                prop_assert!(nodes.iter().any(|n| matches!(n, trees::Node::Link { .. })), "{}", msg);
                prop_assert!(msg.contains("generated archive failed validation: unsafe archive"), "{}", msg);
                prop_assert!(!out.exists());
                prop_assert_eq!(std::fs::read_dir(t.path().join("b")).unwrap().count(), 0);
            }
        }
    }
}
