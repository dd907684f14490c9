//! box against the smolvm people install today (~1.33, the simulator's default personality):
//! it labels the machines it creates and treats one as its own only while name and labels
//! agree, it stops at a machine someone paused, and doctor tells a box kept after a failure
//! from one whose run was killed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod lifecycle_support;

use lifecycle_support::World;

/// The `labels` object smolvm lists for `name`.
fn labels_of(w: &World, name: &str) -> serde_json::Value {
    let out = w.sim(&["machine", "ls", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    list.as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .map(|m| m["labels"].clone())
        .unwrap_or(serde_json::Value::Null)
}

#[test]
fn box_labels_its_machine_and_leaves_a_same_named_stranger_alone() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.33.0");
    let r = w.run(&["new", "alpha"]);
    assert!(r.ok(), "{r}");
    let create = w
        .calls()
        .into_iter()
        .find(|c| c.get(1).map(String::as_str) == Some("create"))
        .unwrap();
    assert!(
        create.iter().any(|a| a == "--net"),
        "box always passes --net: {create:?}"
    );
    let id = w.row("alpha")["machine_label"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(id.len(), 32, "{id}");
    assert_eq!(
        labels_of(&w, "alpha"),
        serde_json::json!({"hermes-box": "alpha", "hermes-box-id": id})
    );

    // The box's machine goes away behind box's back and someone makes another 'alpha'.
    assert!(
        w.sim(&["machine", "delete", "--name", "alpha", "-f"])
            .status
            .success()
    );
    assert!(
        w.sim(&[
            "machine", "create", "--name", "alpha", "--", "sleep", "infinity"
        ])
        .status
        .success()
    );
    let r = w.run(&["stop", "alpha"]);
    assert_eq!(r.code, Some(1), "{r}");
    assert!(
        r.stderr.contains("is not the one box created for 'alpha'"),
        "{r}"
    );
    let r = w.run(&["doctor", "alpha"]);
    assert!(r.stdout.contains("is not the one box created"), "{r}");
    let r = w.run(&["rm", "alpha", "--force"]);
    assert!(r.ok(), "{r}");
    assert!(r.stderr.contains("leaving it alone"), "{r}");
    assert!(!w.row_exists("alpha"));
    assert_eq!(
        w.machines(),
        vec![("alpha".to_string(), "created".to_string())],
        "the stranger's machine is untouched"
    );
    let deletes = w
        .calls()
        .iter()
        .filter(|c| c.get(1).map(String::as_str) == Some("delete"))
        .count();
    assert_eq!(deletes, 1, "only the test's own delete: {}", w.calls_text());
}

#[test]
fn a_paused_box_is_reported_not_stopped_or_started() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.33.0");
    assert!(w.run(&["new", "alpha"]).ok());
    assert!(
        w.sim(&["machine", "pause", "--name", "alpha"])
            .status
            .success()
    );
    for verb in ["stop", "start"] {
        let r = w.run(&[verb, "alpha"]);
        assert_eq!(r.code, Some(1), "{verb}: {r}");
        assert!(
            r.stderr.contains("is paused")
                && r.stderr.contains("smolvm machine resume --name alpha"),
            "{verb}: {r}"
        );
    }
    assert_eq!(
        w.machines(),
        vec![("alpha".to_string(), "paused".to_string())],
        "box changed nothing"
    );
    let r = w.run(&["doctor", "alpha"]);
    assert!(
        r.stdout.contains("paused: smolvm saved its execution"),
        "{r}"
    );
    assert!(
        w.run(&["rm", "alpha", "--force"]).ok(),
        "rm removes a paused box"
    );
    assert!(w.machines().is_empty());
}

#[test]
fn doctor_says_a_box_was_kept_on_purpose_after_a_failure() {
    if !lifecycle_support::prerequisites() {
        return;
    }
    let mut w = World::new("1.33.0");
    let r = w.run_env(
        &["new", "alpha"],
        &[
            ("SMOLVM_SIM_FAIL", "exec:always@hb init"),
            ("BOX_KEEP_ON_FAILURE", "1"),
        ],
    );
    assert_eq!(r.code, Some(1), "{r}");
    assert!(w.row_exists("alpha"), "kept: {r}");
    let r = w.run(&["doctor", "alpha"]);
    assert!(
        r.stdout
            .contains("kept on purpose after a failure (box new failed while"),
        "{r}"
    );
    assert!(r.stdout.contains("box rm alpha --force"), "{r}");
    assert!(!r.stdout.contains("never finished"), "{r}");
    assert!(w.run(&["rm", "alpha", "--force"]).ok());
}
