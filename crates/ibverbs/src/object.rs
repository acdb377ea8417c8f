//! How the library hands objects to C: each verbs object is one heap allocation holding
//! the rdma-core struct the program sees (first, so the program's pointer is the
//! object's) and the oxrdma object behind it. The program's pointer stays valid and
//! unmoved until it destroys the object.

use crate::errno::errno_of;
use oxrdma::Error;
use std::cell::UnsafeCell;
use std::ffi::c_int;

/// A verbs object: `ibv` is what the program holds a pointer to, `ox` does the work.
/// The program may write `ibv`'s fields (it is C's struct), and so may the library (e.g.
/// `ibv_qp.state` after a modify): hence the `UnsafeCell`.
#[repr(C)]
#[derive(Debug)]
pub struct Obj<I, O> {
    ibv: UnsafeCell<I>,
    /// None only inside `destroy`, between taking it out and putting it back on failure.
    ox: Option<O>,
}

impl<I, O> Obj<I, O> {
    /// Moves the object to the heap; returns the program's pointer to it.
    pub fn into_raw(ibv: I, ox: O) -> *mut I {
        let b = Box::new(Obj {
            ibv: UnsafeCell::new(ibv),
            ox: Some(ox),
        });
        Box::into_raw(b).cast()
    }

    /// The object behind `p`.
    ///
    /// # Safety
    /// `p` is NULL or came from `into_raw` of this same `Obj<I, O>` and is not destroyed.
    pub unsafe fn get<'a>(p: *mut I) -> Option<&'a Self> {
        // SAFETY: the caller's promise; `ibv` is the first field of a repr(C) struct, so
        // the two pointers are the same address.
        unsafe { p.cast::<Self>().as_ref() }
    }

    /// The program's struct (read or written only through raw pointers: the program
    /// may write it at any time).
    pub fn ibv(&self) -> *mut I {
        self.ibv.get()
    }

    /// The oxrdma object.
    pub fn ox(&self) -> &O {
        self.ox.as_ref().expect("present outside `destroy`")
    }

    /// Destroys the object behind `p` with `f`; on failure the object stays as it was (at
    /// the same address) and the errno is returned. NULL is EINVAL.
    ///
    /// # Safety
    /// As `get`, and no other thread uses the object meanwhile (the program is giving it
    /// back).
    pub unsafe fn destroy(p: *mut I, f: impl FnOnce(O) -> Result<(), (O, Error)>) -> c_int {
        if p.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's promise: `p` came from `Box::into_raw` of a `Self`.
        let mut b = unsafe { Box::from_raw(p.cast::<Self>()) };
        let Some(ox) = b.ox.take() else {
            // Being destroyed by another thread: leave it to that one.
            Box::leak(b);
            return libc::EBUSY;
        };
        match f(ox) {
            Ok(()) => 0,
            Err((ox, e)) => {
                b.ox = Some(ox);
                Box::leak(b);
                errno_of(&e)
            }
        }
    }
}
