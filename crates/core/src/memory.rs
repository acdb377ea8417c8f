//! Registered memory: bytes that the application and the engine (the "NIC") both reach, as
//! with DMA. This is the only `unsafe` in the core.
//!
//! Like real RDMA hardware, the engine copies into and out of this memory while application
//! threads may be touching it; ordering between the two is the application's business (it
//! learns that a transfer finished from a completion). Atomics use real CPU atomics so they
//! are atomic against the application's own atomic accesses too.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;

/// Alignment of buffers oxrdma allocates: a page, so atomics and O_DIRECT-style users are
/// happy.
const ALIGN: usize = 4096;

/// A fixed-size byte buffer shared between the application and the engine.
#[derive(Debug)]
pub struct SharedBuffer {
    ptr: NonNull<u8>,
    len: usize,
    /// Set when this buffer allocated the memory (and so must free it).
    owned: Option<Layout>,
}

// SAFETY: the buffer is plain bytes with no thread affinity; concurrent access goes through
// raw copies and atomics, exactly as a DMA engine and CPU threads share memory.
unsafe impl Send for SharedBuffer {}
// SAFETY: as above; no method hands out `&mut` to the bytes.
unsafe impl Sync for SharedBuffer {}

impl SharedBuffer {
    /// A new zeroed buffer of `len` bytes (page-aligned). `len` 0 is allowed.
    pub fn new(len: usize) -> Result<SharedBuffer, crate::VerbsError> {
        if len == 0 {
            return Ok(SharedBuffer {
                ptr: NonNull::dangling(),
                len: 0,
                owned: None,
            });
        }
        let layout = Layout::from_size_align(len, ALIGN)
            .map_err(|_| crate::VerbsError::InvalidArgument("memory region too large"))?;
        // SAFETY: layout has non-zero size.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or(crate::VerbsError::OutOfMemory)?;
        Ok(SharedBuffer {
            ptr,
            len,
            owned: Some(layout),
        })
    }

    /// Wraps memory the caller owns (a C program's `ibv_reg_mr` buffer).
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes for the whole life of the
    /// returned value, and must not be freed while it exists.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> Option<SharedBuffer> {
        let ptr = if len == 0 {
            NonNull::dangling()
        } else {
            NonNull::new(ptr)?
        };
        Some(SharedBuffer {
            ptr,
            len,
            owned: None,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Address of the first byte (what `ibv_reg_mr` would call `addr`).
    pub fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    fn check(&self, offset: usize, len: usize) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// Copies `src` into the buffer at `offset`. Returns false (and copies nothing) when the
    /// range is out of bounds.
    pub fn write(&self, offset: usize, src: &[u8]) -> bool {
        if !self.check(offset, src.len()) {
            return false;
        }
        if !src.is_empty() {
            // SAFETY: the range is inside the allocation (checked above) and `src` cannot
            // overlap it, since no `&[u8]` into this buffer is ever handed out.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr(),
                    self.ptr.as_ptr().add(offset),
                    src.len(),
                )
            };
        }
        true
    }

    /// Copies bytes at `offset` into `dst`. Returns false when the range is out of bounds.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
        if !self.check(offset, dst.len()) {
            return false;
        }
        if !dst.is_empty() {
            // SAFETY: in bounds (checked); `dst` is a unique borrow and so cannot alias.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.ptr.as_ptr().add(offset),
                    dst.as_mut_ptr(),
                    dst.len(),
                )
            };
        }
        true
    }

    /// Copies `len` bytes from `src` at `src_off` to `self` at `dst_off` (they may be the same
    /// buffer; overlapping ranges are handled).
    pub fn copy_from(
        &self,
        dst_off: usize,
        src: &SharedBuffer,
        src_off: usize,
        len: usize,
    ) -> bool {
        if !self.check(dst_off, len) || !src.check(src_off, len) {
            return false;
        }
        if len != 0 {
            // SAFETY: both ranges are in bounds (checked); `copy` allows overlap.
            unsafe {
                std::ptr::copy(
                    src.ptr.as_ptr().add(src_off),
                    self.ptr.as_ptr().add(dst_off),
                    len,
                )
            };
        }
        true
    }

    /// The 8 bytes at `offset` as an atomic, if in bounds and 8-byte aligned in memory.
    pub fn atomic_u64(&self, offset: usize) -> Option<&AtomicU64> {
        if !self.check(offset, 8) {
            return None;
        }
        // SAFETY: in bounds (checked).
        let p = unsafe { self.ptr.as_ptr().add(offset) };
        if (p as usize) % 8 != 0 {
            return None;
        }
        // SAFETY: `p` is 8-byte aligned, valid for 8 bytes for as long as `self` lives, and
        // AtomicU64 has the size and alignment of u64. Other access to these bytes is either
        // atomic or a raw copy, as on real hardware.
        Some(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }
}

impl Drop for SharedBuffer {
    fn drop(&mut self) {
        if let Some(layout) = self.owned {
            // SAFETY: allocated in `new` with exactly this layout, freed once.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn bounds_are_checked() {
        let b = SharedBuffer::new(16).unwrap();
        assert!(b.write(8, &[1; 8]));
        assert!(!b.write(9, &[1; 8]));
        assert!(!b.write(usize::MAX, &[1]));
        let mut out = [0u8; 8];
        assert!(b.read(8, &mut out));
        assert_eq!(out, [1; 8]);
        assert!(!b.read(12, &mut out));
        assert!(b.atomic_u64(8).is_some());
        assert!(b.atomic_u64(4).is_none());
        assert!(b.atomic_u64(12).is_none());
        assert_eq!(b.addr() % 4096, 0);
    }

    #[test]
    fn atomics_are_shared_between_threads() {
        let b = std::sync::Arc::new(SharedBuffer::new(8).unwrap());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let b = b.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        b.atomic_u64(0).unwrap().fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        let mut out = [0u8; 8];
        b.read(0, &mut out);
        assert_eq!(u64::from_ne_bytes(out), 4000);
    }

    #[test]
    fn overlapping_copy_within_one_buffer() {
        let b = SharedBuffer::new(8).unwrap();
        b.write(0, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(b.copy_from(2, &b, 0, 4));
        let mut out = [0u8; 8];
        b.read(0, &mut out);
        assert_eq!(out, [1, 2, 1, 2, 3, 4, 7, 8]);
        let empty = SharedBuffer::new(0).unwrap();
        assert!(empty.write(0, &[]));
        assert!(!empty.write(0, &[1]));
    }
}
