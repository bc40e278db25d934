//! nodeplugins
fn main() {}
