//! The shipped lists: the names every box under `EGRESS=allowlist` may reach, and the
//! credential shorthands for the agents box installs.

/// What the box itself needs to reach under `EGRESS=allowlist`, each with why. smolvm's
/// `--allow-host` admits a name and its subdomains.
pub const AGENTS: &[(&str, &str)] = &[
    (
        "anthropic.com",
        "Claude Code's API and sign-in (api., console., statsig.)",
    ),
    ("claude.ai", "Claude Code's subscription sign-in"),
    ("claude.com", "Claude Code's sign-in pages"),
    ("openai.com", "Codex's API and sign-in (api., auth.)"),
    ("chatgpt.com", "Codex's ChatGPT sign-in and backend"),
    ("openrouter.ai", "Hermes's default model provider"),
    ("nousresearch.com", "Hermes's installer and Nous portal"),
    (
        "npmjs.org",
        "the npm registry (Claude Code, Codex, Executor)",
    ),
    (
        "nodesource.com",
        "Node.js where the distribution's is too old",
    ),
    (
        "integrations.sh",
        "Executor's catalog of integrations (integrations.sh/api.json, fetched at start)",
    ),
    ("pypi.org", "PyPI, for Hermes"),
    ("pythonhosted.org", "PyPI's files"),
    ("astral.sh", "uv, which Hermes's installer uses"),
    ("github.com", "git, and Hermes's sources"),
    ("githubusercontent.com", "files from GitHub"),
    ("ubuntu.com", "the Ubuntu archive (apt)"),
    ("debian.org", "the Debian archive (apt)"),
];

/// Credential shorthands for the agents box installs: the variable each agent reads and the
/// API host it sends it to.
pub const SHORTHANDS: &[(&str, &str, &str)] = &[
    ("anthropic", "ANTHROPIC_API_KEY", "api.anthropic.com"),
    ("openai", "OPENAI_API_KEY", "api.openai.com"),
    ("openrouter", "OPENROUTER_API_KEY", "openrouter.ai"),
];
