#![no_main]
//! Body: box_proto::fuzzing::box_env (shared with the corpus-replay test).

libfuzzer_sys::fuzz_target!(|data: &[u8]| box_proto::fuzzing::box_env(data));
