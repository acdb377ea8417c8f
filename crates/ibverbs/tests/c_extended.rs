//! The extended CQ and QP from C (`tests/c/extended.c`): `ibv_create_cq_ex` polled with
//! `ibv_start_poll`/`ibv_next_poll`/`ibv_wc_read_*`, `ibv_create_qp_ex` posting through
//! `ibv_wr_*` (WRITE, WRITE with immediate, READ, both atomics, inline SEND with
//! immediate in one batch, bytes checked), batches that fail or are aborted posting
//! nothing, and what rxe does not offer answered EOPNOTSUPP.

mod common;

#[test]
fn the_extended_verbs_work_from_c() {
    common::assert_all_pass("crates/ibverbs/tests/c/extended.c", 7);
}
