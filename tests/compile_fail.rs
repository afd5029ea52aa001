//! Wrong WQE segment sequences are compile errors (type-state builder).
#[test]
fn wrong_builder_sequences_do_not_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
