//! Asynchronous events from C (`tests/c/async_events.c`): `async_fd` is a descriptor
//! readable exactly while events wait, `ibv_get_async_event` answers EAGAIN on it made
//! non-blocking with none waiting, and names the SRQ of IBV_EVENT_SRQ_LIMIT_REACHED and
//! the QP of IBV_EVENT_QP_LAST_WQE_REACHED.

mod common;

#[test]
fn async_events_reach_c_on_a_pollable_descriptor() {
    common::assert_all_pass("crates/ibverbs/tests/c/async_events.c", 4);
}
