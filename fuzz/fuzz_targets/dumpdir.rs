#![no_main]
//! Body: box_proto::fuzzing::dumpdir (shared with the corpus-replay test).

libfuzzer_sys::fuzz_target!(|data: &[u8]| box_proto::fuzzing::dumpdir(data));
