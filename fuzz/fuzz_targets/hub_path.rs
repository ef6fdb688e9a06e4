#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cryod::fuzzing::hub_path(data));
