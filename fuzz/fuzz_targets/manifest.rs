#![no_main]
//! Body: box_proto::fuzzing::manifest (shared with the corpus-replay test).

libfuzzer_sys::fuzz_target!(|data: &[u8]| box_proto::fuzzing::manifest(data));
