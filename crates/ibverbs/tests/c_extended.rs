//! The extended CQ and QP from C (`tests/c/extended.c`): `ibv_create_cq_ex` polled with
//! `ibv_start_poll`/`ibv_next_poll`/`ibv_wc_read_*`, `ibv_create_qp_ex` posting through
//! `ibv_wr_*` (WRITE, WRITE with immediate, READ, both atomics, inline SEND with
//! immediate in one batch, bytes checked), batches that fail or are aborted posting
//! nothing, and what rxe does not offer answered EOPNOTSUPP.

mod common;

#[test]
fn the_extended_verbs_work_from_c() {
    let Some(out) = common::compile_and_run("crates/ibverbs/tests/c/extended.c") else {
        return;
    };
    let text = common::text(&out);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("FAIL"), "{text}");
    let passed = text.lines().filter(|l| l.starts_with("PASS ")).count();
    assert_eq!(passed, 7, "{text}");
}
