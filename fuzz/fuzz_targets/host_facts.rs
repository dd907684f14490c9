#![no_main]
//! Body: box_proto::fuzzing::host_facts (shared with the corpus-replay test).

libfuzzer_sys::fuzz_target!(|data: &[u8]| box_proto::fuzzing::host_facts(data));
