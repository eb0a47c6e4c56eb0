//! Placeholder, replaced by the decision benchmark.
fn main() {}
