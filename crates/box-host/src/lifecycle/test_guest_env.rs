//! `BOX_TEST_GUEST_ENV="K=V,K=V"`: persisted guest environment that the simulator tests add
//! at create. Read by `box new`/`box load` and by the base builder, whose key includes it, so
//! it lives here below both rather than in a verb.

/// `BOX_TEST_GUEST_ENV="K=V,K=V"`: extra persisted guest environment, for tests against the
/// simulator only (e.g. pointing provisioning at npm tools the host already has). Never
/// secrets: smolvm records these and shows them on its argv.
pub fn from_env() -> Vec<(String, String)> {
    std::env::var("BOX_TEST_GUEST_ENV")
        .unwrap_or_default()
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}
