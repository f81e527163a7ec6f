//! Fuzz target `config_json`: the bytes go to `rkv_model::untrusted::config_json`; errors are fine,
//! panics, hangs and runaway allocations are not.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rkv_model::untrusted::config_json(data);
});
