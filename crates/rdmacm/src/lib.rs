//! oxrdma's `librdmacm.so.1`: rdma-core 44's 68 librdmacm functions under their names and
//! version nodes (RDMACM_1.0 to 1.3), each a jump to the same function in oxrdma's
//! `libibverbs.so.1` (`oxr_rdma_create_id` …), where the RDMA CM lives beside the verbs
//! objects it uses. A jump passes every argument as it came, variadic ones included
//! (`rfcntl`). `build.rs` writes the jumps from `symbols.txt`.

include!(concat!(env!("OUT_DIR"), "/trampolines.rs"));
