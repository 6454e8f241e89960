//! Every committed input (seeds and past findings, `fuzz/corpus/<target>/`) through its
//! target's body, on stable and without libFuzzer: a crash the fuzzer once found stays fixed.
use std::path::Path;

use sockwatch_fuzz::TARGETS;

#[test]
fn every_target_has_a_seed_corpus_and_no_input_panics() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (name, body) in TARGETS {
        let dir = root.join(name);
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}: every target needs seeds", dir.display()));
        let mut ran = 0;
        for entry in entries {
            let path = entry.expect("corpus entry").path();
            let input = std::fs::read(&path).expect("corpus file");
            body(&input);
            ran += 1;
        }
        assert!(ran > 0, "{}: no seeds", dir.display());
        println!("{name}: {ran} inputs");
    }
}
