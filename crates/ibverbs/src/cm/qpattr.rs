//! oxrdma's QP attributes as `struct ibv_qp_attr` and a mask (`rdma_init_qp_attr`), and
//! moving a program's QP with them through the library's own `ibv_modify_qp` (so the
//! QP's `state` field follows).

use crate::abi::{ibv_qp, ibv_qp_attr};
use oxrdma::QpAttr;
use std::ffi::c_int;

/// `a` as C attributes and the mask of those it sets.
pub fn to_ibv(a: &QpAttr) -> (ibv_qp_attr, c_int) {
    let (c, m) = crate::abi::qp_attr::to_c(a);
    (c, m as c_int)
}

/// Modifies the program's QP `qp` to `a`.
pub fn modify(qp: *mut ibv_qp, a: &QpAttr) -> Result<(), c_int> {
    let (mut c, mask) = to_ibv(a);
    // SAFETY: `qp` is a live QP of this library's (the id's); `c` is a valid attribute.
    match unsafe { crate::qp::modify_qp(qp, &mut c, mask) } {
        0 => Ok(()),
        e => Err(e),
    }
}
