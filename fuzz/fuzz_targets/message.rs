#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cryod::fuzzing::message(data));
