# hermes-box-lite tasks. `just --list` shows them all.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Build, install `box`, `hb` and `smolvm-sim` into ~/.cargo/bin, then run the demo lifecycle
default: install demo

# Install everything the build and the tests need (Debian packages, npm tools, rustup targets)
setup:
    bash scripts/setup.sh

# Build the workspace (debug)
build:
    cargo build --workspace

# Install box, hb and smolvm-sim into ~/.cargo/bin (one shared target dir: dependencies build once)
install:
    cargo install --locked --quiet --target-dir target/install --path crates/box-host
    cargo install --locked --quiet --target-dir target/install --path crates/hb-guest
    cargo install --locked --quiet --target-dir target/install --path crates/smolvm-sim

# The whole test suite: formatting, lints, unit, property, end-to-end and contract tests
test: lint
    cargo test --workspace --all-targets --no-fail-fast

# Formatting and lints, as CI holds them; the house stays as built (no import runs up a floor, no circle); the docs build
lint: house-test house doc
    cargo fmt --all -- --check
    cargo clippy --workspace --all-targets -- -D warnings

# The API docs (target/doc), refusing any intra-doc link that is broken or points into a private item
doc:
    RUSTDOCFLAGS="-D rustdoc::broken_intra_doc_links -D rustdoc::private_intra_doc_links" cargo doc --workspace --no-deps

# The house: every import from a module up to a higher room, and every circle of files, per crate (passes at 0 of each)
house:
    python3 scripts/house.py

# The house check's own tests: tiny crates in a temporary directory
house-test:
    python3 scripts/house_test.py

# Fuzz box-proto's parsers (cargo-fuzz on stable via RUSTC_BOOTSTRAP; target="" runs each in turn)
fuzz target="" seconds="60":
    bash scripts/fuzz.sh "{{target}}" "{{seconds}}"

# The smolvm contract suite (SMOLVM=/path/to/smolvm to point it at a real smolvm)
contract:
    cargo test -p smolvm-sim --test contract -- --test-threads=1

# Benchmarks against the seed's shell pipeline, then boxes from a base beside --fresh (prints; asserts nothing)
bench:
    bash scripts/bench.sh
    bash scripts/bench-base.sh

# Run the lifecycle against smolvm, or against the bundled simulator where smolvm is missing
demo:
    bash scripts/demo.sh

# Cross-built release tarballs into dist/ (installs the cross toolchain first: zig, qemu, targets)
release:
    bash scripts/setup.sh --release
    bash scripts/release.sh

# Build the release twice in separate trees and compare every byte (reproducibility proof)
release-check:
    bash scripts/setup.sh --release
    bash scripts/release.sh --check
