//! Asynchronous events from C (`tests/c/async_events.c`): `async_fd` is a descriptor
//! readable exactly while events wait, `ibv_get_async_event` answers EAGAIN on it made
//! non-blocking with none waiting, and names the SRQ of IBV_EVENT_SRQ_LIMIT_REACHED and
//! the QP of IBV_EVENT_QP_LAST_WQE_REACHED.

mod common;

#[test]
fn async_events_reach_c_on_a_pollable_descriptor() {
    let Some(out) = common::compile_and_run("crates/ibverbs/tests/c/async_events.c") else {
        return;
    };
    let text = common::text(&out);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("FAIL"), "{text}");
    let passed = text.lines().filter(|l| l.starts_with("PASS ")).count();
    assert_eq!(passed, 4, "{text}");
}
