//! One device opened twice in one process (`tests/c/same_device.c`), as rdma-core's test
//! suite and pyverbs programs do: both contexts report one GID, and QPs connected to their
//! own GID reach each other (RC atomics and SEND, UD SEND), with each context's
//! asynchronous events its own.

mod common;

#[test]
fn two_contexts_of_one_device_are_one_nic() {
    common::assert_all_pass("crates/ibverbs/tests/c/same_device.c", 2);
}
