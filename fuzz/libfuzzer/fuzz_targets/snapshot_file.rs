#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    keel_fuzz::snapshot_file(data);
});
