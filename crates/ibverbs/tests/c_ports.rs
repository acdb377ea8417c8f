//! The device, port and GID queries from C (`tests/c/ports.c`): `ibv_query_device_ex`,
//! the port's attributes as rxe reports an Ethernet port, the one RoCE v2 GID, its
//! extended entry naming the interface, the table, and the answers beyond them.

mod common;

#[test]
fn device_port_and_gid_queries_answer_as_on_rxe() {
    common::assert_all_pass("crates/ibverbs/tests/c/ports.c", 5);
}
