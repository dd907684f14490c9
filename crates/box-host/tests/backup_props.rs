//! Property: export → encrypt (save pipeline: validate, verify, publish) → extract
//! reproduces arbitrary generated trees, minus the symlinks export names as skipped. Each
//! case pays four passphrase derivations (S2K); the crypto crates are built optimised in
//! test builds (root Cargo.toml), so they cost milliseconds. hb-guest's export_import test
//! runs the same generator through export → import without encryption.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod backup_support;

use backup_support::{PASS, secret, trees};
use box_host::backup::{load, save};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn export_encrypt_extract_reproduces_generated_trees(nodes in trees::nodes()) {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        trees::build(&src, &nodes);
        trees::backdate(&src);
        let parts = t.path().join("parts");
        // Export names the links a restore would refuse and leaves them out...
        let opts = hb_guest::archive::export::ExportOptions::new(&src, &parts, 5000);
        let summary = hb_guest::archive::export::export(&opts, Box::new(|_| {})).unwrap();
        let skipped: Vec<String> = summary
            .skipped
            .iter()
            .filter_map(|w| w.strip_prefix("skipping symlink ./"))
            .filter_map(|rest| rest.split(" -> ").next())
            .map(String::from)
            .collect();
        let out = t.path().join("b/x-20261129-120000.tar.zst.gpg");
        let pass = secret(PASS);
        let mut p = save::Pipeline::begin(&out, &pass).unwrap();
        p.feed_parts_dir(&parts).unwrap();
        // ...so the save pipeline's validator accepts every export, and the rest comes back.
        let sealed = p.finish();
        prop_assert!(sealed.is_ok(), "save refused an export: {:?}", sealed.err());
        sealed.unwrap().verify().unwrap().publish().unwrap();
        let v = load::validate_backup(&out, &pass).unwrap();
        let target = t.path().join("out");
        load::extract(&v, &pass, &target).unwrap();
        let mut want = trees::snapshot(&src);
        for path in &skipped {
            prop_assert!(want.remove(path).is_some(), "skipped {} is not in the tree", path);
        }
        prop_assert_eq!(trees::snapshot(&target), want);
    }
}
