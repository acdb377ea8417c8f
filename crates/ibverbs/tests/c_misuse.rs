//! Misuse a C program can commit and the library can detect (`tests/c/misuse.c`: invalid
//! transitions and masks, posting in RESET, INIT and ERR, bad registrations and CQ sizes,
//! busy objects, NULL and foreign handles, bad GID and port indexes): each case gets
//! rdma-core-on-rxe's return value and errno or completion status, and the process lives.

mod common;

#[test]
fn every_misuse_gets_rdma_cores_answer_and_the_process_lives() {
    common::assert_all_pass("crates/ibverbs/tests/c/misuse.c", 36);
}
