//! The project's C example (`examples/rc_verbs.c`), compiled against Debian's
//! `infiniband/verbs.h` and linked with `-libverbs`, runs on this library: RDMA WRITE,
//! READ, SEND with immediate and both atomics between two contexts of one process, each
//! result checked by the program.

mod common;

#[test]
fn the_c_example_runs_every_rc_operation_and_checks_the_bytes() {
    let Some(out) = common::compile_and_run("examples/rc_verbs.c") else {
        return;
    };
    let text = common::text(&out);
    assert!(out.status.success(), "{text}");
    for line in [
        "RDMA WRITE 1024 B: ok",
        "RDMA READ 1024 B: ok",
        "SEND with immediate 512 B: ok",
        "atomics: ok",
        "all checks passed",
    ] {
        assert!(text.contains(line), "no '{line}' in:\n{text}");
    }
}
