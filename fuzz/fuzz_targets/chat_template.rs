//! Fuzz target `chat_template`: the bytes go to `rkv_model::untrusted::chat_template`; errors are fine,
//! panics, hangs and runaway allocations are not.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = rkv_model::untrusted::chat_template(data);
});
