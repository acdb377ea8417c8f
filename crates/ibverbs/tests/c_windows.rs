//! Memory windows from C (`tests/c/windows.c`): type 1 windows bound with `ibv_bind_mw`
//! and unbound, type 2 windows bound by a work request and invalidated by the peer's SEND
//! and locally, access outside a window or through a dead key refused remotely with no
//! byte changed, the header's and rxe's argument checks, and a region kept busy while a
//! window is bound to it.

mod common;

#[test]
fn memory_windows_work_from_c() {
    common::assert_all_pass("crates/ibverbs/tests/c/windows.c", 8);
}
