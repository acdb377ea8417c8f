//! Errors returned synchronously by verbs calls (the `errno` of libibverbs).

/// Why a verbs call was refused. Nothing was changed when one of these is returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerbsError {
    /// An argument is out of range or inconsistent (EINVAL).
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// A modify-QP attribute is missing for this transition, or not allowed in it (EINVAL).
    #[error("modify QP {from:?} -> {to:?}: {what}")]
    InvalidTransition {
        /// The QP's current state.
        from: crate::QpState,
        /// The state asked for.
        to: crate::QpState,
        /// What is wrong: the attributes missing or not allowed, or another reason.
        what: String,
    },
    /// No such object (ENOENT / EINVAL in libibverbs).
    #[error("no such {0}")]
    NotFound(&'static str),
    /// A queue is full or a device limit is reached (ENOMEM).
    #[error("resource exhausted: {0}")]
    Exhausted(&'static str),
    /// The object is still in use (EBUSY): e.g. destroying a PD that has MRs or QPs.
    #[error("busy: {0}")]
    Busy(&'static str),
    /// The QP is in a state that does not allow this call.
    #[error("queue pair {qpn:#x} is in state {state:?}: {what}")]
    BadState {
        /// The QP's number.
        qpn: u32,
        /// The state it is in.
        state: crate::QpState,
        /// What the call needs (e.g. "post_send needs RTS").
        what: &'static str,
    },
    /// Memory could not be allocated.
    #[error("out of memory")]
    OutOfMemory,
}

/// The result of a verbs call.
pub type Result<T> = core::result::Result<T, VerbsError>;
