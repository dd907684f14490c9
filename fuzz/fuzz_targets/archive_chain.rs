#![no_main]
//! Body: box_proto::fuzzing::archive_chain (shared with the corpus-replay test).

libfuzzer_sys::fuzz_target!(|data: &[u8]| box_proto::fuzzing::archive_chain(data));
