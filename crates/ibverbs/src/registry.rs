//! Each context's CQs, QPs and SRQs by the numbers oxrdma's events carry (a CQ's handle,
//! a QPN, an SRQ's id), so that a completion event or an asynchronous event can hand the
//! program its own pointer. An object is remembered when created and forgotten when
//! destroyed; an event for a number no longer here is for nobody.

use std::collections::HashMap;

/// Which table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Cq,
    Qp,
    Srq,
}

/// The program's pointers, by kind and number.
#[derive(Debug, Default)]
pub struct Registry {
    objects: HashMap<(Kind, u32), usize>,
}

impl Registry {
    /// Remembers the program's pointer `p` to object `id`.
    pub fn remember<T>(&mut self, kind: Kind, id: u32, p: *mut T) {
        self.objects.insert((kind, id), p as usize);
    }

    /// Forgets object `id` (it was destroyed).
    pub fn forget(&mut self, kind: Kind, id: u32) {
        self.objects.remove(&(kind, id));
    }

    /// The program's pointer to object `id`, if it still exists.
    pub fn lookup<T>(&self, kind: Kind, id: u32) -> Option<*mut T> {
        self.objects.get(&(kind, id)).map(|&p| p as *mut T)
    }
}
