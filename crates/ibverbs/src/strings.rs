//! The `*_str` helpers: the words libibverbs prints for statuses, node types, port
//! states and events.

use std::ffi::{c_char, c_int, c_uint, CStr};

fn pick(table: &[&'static CStr], i: i64) -> *const c_char {
    usize::try_from(i)
        .ok()
        .and_then(|i| table.get(i))
        .unwrap_or(&c"unknown")
        .as_ptr()
}

/// `ibv_wc_status_str`.
pub(crate) extern "C" fn wc_status_str(status: c_uint) -> *const c_char {
    const T: &[&CStr] = &[
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM rendezvous error",
    ];
    pick(T, status.into())
}

/// `ibv_node_type_str`.
pub(crate) extern "C" fn node_type_str(t: c_int) -> *const c_char {
    const T: &[&CStr] = &[
        c"unknown",
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
        c"unspecified",
    ];
    pick(T, t.into())
}

/// `ibv_port_state_str`.
pub(crate) extern "C" fn port_state_str(s: c_uint) -> *const c_char {
    const T: &[&CStr] = &[
        c"no state change (NOP)",
        c"down",
        c"init",
        c"armed",
        c"active",
        c"active defer",
    ];
    pick(T, s.into())
}

/// `ibv_event_type_str`.
pub(crate) extern "C" fn event_type_str(e: c_uint) -> *const c_char {
    const T: &[&CStr] = &[
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    pick(T, e.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(p: *const c_char) -> &'static str {
        // SAFETY: every pointer these functions return is a 'static C string.
        unsafe { CStr::from_ptr(p) }.to_str().unwrap()
    }

    #[test]
    fn known_values_have_their_words_and_others_are_unknown() {
        assert_eq!(s(wc_status_str(5)), "Work Request Flushed Error");
        assert_eq!(s(wc_status_str(12)), "transport retry counter exceeded");
        assert_eq!(s(wc_status_str(999)), "unknown");
        assert_eq!(s(node_type_str(1)), "InfiniBand channel adapter");
        assert_eq!(s(node_type_str(-1)), "unknown");
        assert_eq!(s(port_state_str(4)), "active");
        assert_eq!(s(event_type_str(15)), "SRQ limit reached");
        assert_eq!(s(event_type_str(99)), "unknown");
    }
}
