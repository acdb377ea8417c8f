//! fork() from C (`tests/c/fork.c`): after `ibv_fork_init` the parent keeps moving bytes
//! while a child shares its pages and after children exit; a child can exec, and no
//! descriptor of the library crosses exec.

mod common;

#[test]
fn fork_and_exec_leave_the_parent_working() {
    common::assert_all_pass("crates/ibverbs/tests/c/fork.c", 4);
}
