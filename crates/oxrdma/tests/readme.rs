//! The README's Rust example is `examples/quickstart.rs` word for word, so the two cannot
//! drift apart; and the example runs (`cargo test` only builds examples).

const README: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md");
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/quickstart.rs");

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

#[test]
fn the_readme_shows_the_quickstart_example_whole() {
    let readme = read(README);
    let example = read(EXAMPLE);
    assert!(!example.trim().is_empty(), "quickstart.rs is empty");
    let block = format!("```rust\n{example}```\n");
    assert!(
        readme.contains(&block),
        "README.md does not hold examples/quickstart.rs whole in a ```rust block: \
         copy the file's text, unchanged, between a line \"```rust\" and a line \"```\""
    );
}

/// The example's own code, compiled into this test.
mod quickstart {
    include!("../examples/quickstart.rs");

    pub fn run() -> oxrdma::Result<()> {
        main()
    }
}

#[test]
fn the_quickstart_example_runs() {
    quickstart::run().expect("examples/quickstart.rs failed");
}
