//! `smolvm machine ls --json`, read tolerantly: keys are alphabetical and the array order is
//! arbitrary (docs/smolvm.md, `machine ls --json`), new versions add keys and states, and
//! some fields are `null`. Only `name`, `state` and `labels` matter to box; everything else
//! is optional.
//!
//! What is *not* tolerated: output that is not a JSON array, or an element without a string
//! `name`. Reading garbage as "no machines" would let box believe a machine is gone when it
//! cannot tell, and the cleanup rules forbid that.

use std::fmt;

use serde_json::Value;

/// A machine's state as smolvm reports it. Unknown states are kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineState {
    Created,
    Running,
    Stopped,
    Failed,
    Unreachable,
    /// v1.3.0+: a fork base.
    Frozen,
    /// 1.18+: `machine pause` saved its execution; plain `start`/`stop` refuse it
    /// (`machine has saved execution; use resume`). `pausing` while it is being saved.
    Paused,
    Pausing,
    Other(String),
}

impl MachineState {
    pub fn parse(s: &str) -> Self {
        match s {
            "created" => Self::Created,
            "running" => Self::Running,
            "stopped" => Self::Stopped,
            "failed" => Self::Failed,
            "unreachable" => Self::Unreachable,
            "frozen" => Self::Frozen,
            "paused" => Self::Paused,
            "pausing" => Self::Pausing,
            other => Self::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::Created => "created",
            Self::Running => "running",
            Self::Stopped => "stopped",
            Self::Failed => "failed",
            Self::Unreachable => "unreachable",
            Self::Frozen => "frozen",
            Self::Paused => "paused",
            Self::Pausing => "pausing",
            Self::Other(s) => s,
        }
    }

    pub fn is_running(&self) -> bool {
        *self == Self::Running
    }

    /// Paused or being paused (1.18+): smolvm keeps its execution until `machine resume`.
    pub fn is_paused(&self) -> bool {
        matches!(self, Self::Paused | Self::Pausing)
    }
}

impl fmt::Display for MachineState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One element of `ls --json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub name: String,
    pub state: MachineState,
    pub pid: Option<i64>,
    pub image: Option<String>,
    pub network: Option<bool>,
    /// A count in smolvm's JSON, not the mappings.
    pub ports: Option<u64>,
    /// 1.8+: the machine's labels; `None` when smolvm reports none (older versions).
    pub labels: Option<std::collections::BTreeMap<String, String>>,
}

/// Parses the whole `ls --json` output; machines come back sorted by name.
pub fn parse_machine_list(text: &str) -> Result<Vec<Machine>, String> {
    let value: Value = serde_json::from_str(text.trim()).map_err(|e| {
        format!(
            "not JSON ({e}); first bytes: {:?}",
            text.chars().take(60).collect::<String>()
        )
    })?;
    let Value::Array(items) = value else {
        return Err(format!(
            "expected a JSON array of machines, got {}",
            kind(&value)
        ));
    };
    let mut machines = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        machines.push(parse_machine(item).map_err(|p| format!("machine #{}: {p}", i + 1))?);
    }
    machines.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(machines)
}

fn parse_machine(item: &Value) -> Result<Machine, String> {
    let Value::Object(map) = item else {
        return Err(format!("expected an object, got {}", kind(item)));
    };
    let name = match map.get("name") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(other) => return Err(format!("'name' is {}, not a string", kind(other))),
        None => return Err("no 'name'".into()),
    };
    // A missing or odd state is not a reason to lose the machine; it is shown as is.
    let state = match map.get("state") {
        Some(Value::String(s)) => MachineState::parse(s),
        Some(Value::Null) | None => MachineState::Other("unknown".into()),
        Some(other) => MachineState::Other(other.to_string()),
    };
    Ok(Machine {
        name,
        state,
        pid: map.get("pid").and_then(Value::as_i64),
        image: map.get("image").and_then(Value::as_str).map(str::to_string),
        network: map.get("network").and_then(Value::as_bool),
        ports: map.get("ports").and_then(Value::as_u64),
        labels: map.get("labels").and_then(Value::as_object).map(|l| {
            l.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        }),
    })
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pretty-printed 1.0.4-style listing, keys sorted, machines out of order.
    const S104: &str = r#"[
  {
    "cmd": [],
    "cpus": 4,
    "created_at": 1750000000,
    "entrypoint": null,
    "ephemeral": false,
    "gpu": false,
    "gpu_vram_mib": null,
    "health_cmd": null,
    "image": "ubuntu:24.04",
    "memory_mib": 8192,
    "mounts": 0,
    "name": "zeta",
    "network": true,
    "overlay_gb": null,
    "pid": 4242,
    "ports": 1,
    "restart_policy": "never",
    "state": "running",
    "storage_gb": null
  },
  {
    "image": null,
    "name": "alpha",
    "pid": null,
    "state": "stopped"
  }
]"#;

    #[test]
    fn reads_a_real_listing_in_any_order() {
        let machines = parse_machine_list(S104).unwrap();
        assert_eq!(machines.len(), 2);
        assert_eq!(machines[0].name, "alpha");
        assert_eq!(machines[0].state, MachineState::Stopped);
        assert_eq!(machines[0].pid, None);
        assert_eq!(machines[0].image, None);
        assert_eq!(machines[1].name, "zeta");
        assert!(machines[1].state.is_running());
        assert_eq!(machines[1].pid, Some(4242));
        assert_eq!(machines[1].ports, Some(1));
    }

    #[test]
    fn tolerates_new_keys_and_states() {
        let text = r#"[{"labels":{"a":"b"},"forkable":true,"name":"f","state":"frozen"},
                       {"name":"g","state":"hibernating","cuda":null},
                       {"name":"h"}]"#;
        let m = parse_machine_list(text).unwrap();
        assert_eq!(m[0].state, MachineState::Frozen);
        assert_eq!(m[1].state, MachineState::Other("hibernating".into()));
        assert_eq!(m[1].state.to_string(), "hibernating");
        assert_eq!(m[2].state.as_str(), "unknown");
    }

    #[test]
    fn empty_listing() {
        assert!(parse_machine_list("[]\n").unwrap().is_empty());
    }

    #[test]
    fn refuses_what_it_cannot_read() {
        for bad in [
            "",
            "null",
            "No machines found",
            "{\"name\":\"a\"}",
            "[{\"name\":\"a\"",
            "[1]",
            "[{\"state\":\"running\"}]",
            "[{\"name\":null}]",
            "[{\"name\":\"\"}]",
        ] {
            assert!(parse_machine_list(bad).is_err(), "{bad:?} was accepted");
        }
        let err = parse_machine_list("null").unwrap_err();
        assert_eq!(err, "expected a JSON array of machines, got null");
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_arbitrary_text(text in ".{0,200}") {
            let _ = parse_machine_list(&text);
        }

        #[test]
        fn order_and_extra_keys_do_not_matter(
            names in proptest::collection::btree_set("[a-z][a-z0-9-]{0,10}", 0..8),
            state in "[a-z]{1,12}",
            extra in "[a-z_]{1,10}",
            seed in 0u64..1000,
        ) {
            let mut items: Vec<String> = names
                .iter()
                .map(|n| format!(r#"{{"{extra}x": [null, {{}}], "name": "{n}", "state": "{state}"}}"#))
                .collect();
            // A deterministic shuffle: rotate by the seed.
            if !items.is_empty() {
                let k = (seed as usize) % items.len();
                items.rotate_left(k);
            }
            let parsed = parse_machine_list(&format!("[{}]", items.join(","))).unwrap();
            let got: Vec<&str> = parsed.iter().map(|m| m.name.as_str()).collect();
            let want: Vec<&str> = names.iter().map(String::as_str).collect();
            proptest::prop_assert_eq!(got, want);
            for m in &parsed {
                proptest::prop_assert_eq!(m.state.as_str(), state.as_str());
            }
        }
    }
}
