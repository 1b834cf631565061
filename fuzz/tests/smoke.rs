//! The CI fuzz smoke run: every target on its seeds and a few thousand mutations of them, from a
//! fixed seed (so a failure reproduces). Longer runs: `keel-fuzz <target> --seconds N`, or
//! libFuzzer through `fuzz/libfuzzer`.

use std::sync::atomic::Ordering;

#[test]
fn every_target_survives_a_short_run() {
    for target in keel_fuzz::TARGETS {
        let before = keel_fuzz::APPLIED.load(Ordering::Relaxed);
        let decoded = match keel_fuzz::smoke(target, 0x6b65656c, 3_000) {
            Ok(decoded) => decoded,
            Err(crash) => panic!("{}: {} on input {:02x?}", target.name, crash.message, crash.input),
        };
        let applied = keel_fuzz::APPLIED.load(Ordering::Relaxed) - before;
        eprintln!("{}: {decoded} of 3,000 inputs decoded, {applied} commands applied", target.name);
        // Mutations of valid inputs must often still decode, or the run tests only the decoders'
        // first bytes.
        assert!(decoded > 300, "{}: only {decoded} of 3,000 inputs decoded", target.name);
        // The key and snapshot-file decoders reach no store.
        if !["keys", "snapshot_file"].contains(&target.name) {
            assert!(applied > 0, "{}: no input reached the store", target.name);
        }
    }
    let refused = keel_fuzz::REFUSED.load(Ordering::Relaxed);
    assert!(refused > 0, "no input was refused by the store: the refusal check never ran");
    eprintln!("{refused} refusals checked to leave the store unchanged");
}
