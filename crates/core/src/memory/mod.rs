//! Registered memory: bytes that the application and the engine (the "NIC") both reach, as
//! with DMA. This is the only `unsafe` in the core.
//!
//! Like real RDMA hardware, the engine copies into and out of this memory while application
//! threads may be touching it; ordering between the two is the application's business (it
//! learns that a transfer finished from a completion). So that such a race is a torn read,
//! as under DMA, and not undefined behaviour in Rust's memory model, every copy is made of
//! relaxed atomic loads and stores (aligned 8-byte words, single bytes at the edges), or,
//! for long copies on x86-64, of instructions in assembly (`bulk.rs`) whose loads and
//! stores are relaxed byte accesses to the model (a race may tear at any byte); the one way to plain
//! bytes is the `unsafe` [`SharedBuffer::slice`], whose caller promises there is no
//! writer. A write's last 8 bytes are stored after the rest: a reader that polls the last
//! byte of a WRITE (as ib_write_lat does) sees it change last. RDMA atomics are real CPU
//! atomics, atomic against the application's own atomic accesses too.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU64, AtomicU8};

/// Alignment of buffers oxrdma allocates: a page, so atomics and O_DIRECT-style users are
/// happy.
const ALIGN: usize = 4096;

mod bulk;

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

    /// The buffer's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer is zero bytes long.
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
    /// range is out of bounds. The stores are relaxed atomics, so a copy that races with
    /// another thread's (the engine's, an application's) is defined: a racing reader may
    /// see some old and some new bytes, as memory under DMA, never undefined behaviour.
    /// The last 8 bytes are stored after all the others, so a reader that polls the last
    /// byte of a WRITE (as ib_write_lat does) sees the rest when it changes.
    pub fn write(&self, offset: usize, src: &[u8]) -> bool {
        if !self.check(offset, src.len()) {
            return false;
        }
        // SAFETY: the range is inside the allocation (checked above).
        let dst = unsafe { self.ptr.as_ptr().add(offset) };
        let most = src.len().saturating_sub(8);
        if let Some(how) = bulk::bulk(src.as_ptr(), dst, most) {
            // SAFETY: `dst` is valid for `src.len()` bytes (checked above), `src` is a live
            // slice outside shared memory (no overlap). Its stores are relaxed byte stores to
            // the model; x86 makes a later plain store visible after all of them.
            unsafe { bulk::copy(how, src.as_ptr(), dst, most) };
            // SAFETY: in bounds: `most` + 8 is the checked length.
            store_words(unsafe { dst.add(most) }, &src[most..]);
            return true;
        }
        store_words(dst, src);
        true
    }

    /// Copies bytes at `offset` into `dst`. Returns false when the range is out of bounds.
    /// The loads are relaxed atomics (see [`Self::write`]), or for long reads on x86-64 a
    /// bulk copy (`bulk.rs`), whose loads are relaxed byte loads to the model.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> bool {
        if !self.check(offset, dst.len()) {
            return false;
        }
        // SAFETY: the range is inside the allocation (checked above).
        unsafe { copy_from_shared(self.ptr.as_ptr().add(offset), dst) };
        true
    }

    /// Where `offset..offset + len` starts, if it is inside the buffer: for copies out of
    /// it that live elsewhere (`crc_copy/`), which read it as [`Self::read`] does.
    pub(crate) fn range_start(&self, offset: usize, len: usize) -> Option<*const u8> {
        // SAFETY: in bounds (checked first).
        self.check(offset, len)
            .then(|| unsafe { self.ptr.as_ptr().add(offset).cast_const() })
    }

    /// The bytes at `offset..offset + len` as a plain slice, for code that must hand them
    /// on without a copy (a system call, a C caller).
    ///
    /// # Safety
    /// While the slice lives, no other thread may write these bytes: no RDMA operation that
    /// writes them may be in progress (a posted receive, an incoming WRITE or atomic, a
    /// READ response), and no application thread may write them. As with real RDMA, the
    /// application knows this from its completions.
    pub unsafe fn slice(&self, offset: usize, len: usize) -> Option<&[u8]> {
        self.check(offset, len).then(|| {
            // SAFETY: in bounds (checked) and valid for the life of `self`; the caller
            // promises no concurrent writer.
            unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) }
        })
    }

    /// The 8 bytes at `offset` as an atomic, if in bounds and 8-byte aligned in memory.
    pub fn atomic_u64(&self, offset: usize) -> Option<&AtomicU64> {
        if !self.check(offset, 8) {
            return None;
        }
        // SAFETY: in bounds (checked).
        let p = unsafe { self.ptr.as_ptr().add(offset) };
        if !(p as usize).is_multiple_of(8) {
            return None;
        }
        // SAFETY: `p` is 8-byte aligned, valid for 8 bytes for as long as `self` lives, and
        // AtomicU64 has the size and alignment of u64. Other access to these bytes is either
        // atomic or a raw copy, as on real hardware.
        Some(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }
}

/// The byte at `base + i` as an atomic.
fn byte_at<'a>(base: *mut u8, i: usize) -> &'a AtomicU8 {
    // SAFETY: callers pass an in-bounds index of a live buffer; AtomicU8 has the size and
    // alignment of u8, and every access to shared bytes is atomic.
    unsafe { AtomicU8::from_ptr(base.add(i)) }
}

/// The 8-byte-aligned word at `base + i` as an atomic.
fn word_at<'a>(base: *mut u8, i: usize) -> &'a AtomicU64 {
    // SAFETY: callers pass an in-bounds, 8-aligned offset of a live buffer (see `write`
    // and `read`: `head` aligns it), and every access to shared bytes is atomic.
    unsafe { AtomicU64::from_ptr(base.add(i).cast::<u64>()) }
}

/// Stores `src` at `dst` (valid for `src.len()` bytes) with relaxed atomics: single bytes up
/// to an 8-byte boundary, then aligned words in address order, then single bytes.
fn store_words(dst: *mut u8, src: &[u8]) {
    let head = dst.align_offset(8).min(src.len());
    let (bytes, rest) = src.split_at(head);
    let (words, tail) = rest.split_at(rest.len() & !7);
    for (i, &b) in bytes.iter().enumerate() {
        byte_at(dst, i).store(b, Relaxed);
    }
    for (i, w) in words.chunks_exact(8).enumerate() {
        let w = u64::from_ne_bytes(w.try_into().expect("chunks of 8"));
        word_at(dst, head + 8 * i).store(w, Relaxed);
    }
    for (i, &b) in tail.iter().enumerate() {
        byte_at(dst, head + words.len() + i).store(b, Relaxed);
    }
}

/// Copies `dst.len()` bytes from shared memory at `src`: relaxed loads to the model (see
/// [`SharedBuffer::read`]).
///
/// # Safety
/// `src` is valid for reads of `dst.len()` bytes.
pub(crate) unsafe fn copy_from_shared(src: *const u8, dst: &mut [u8]) {
    if let Some(how) = bulk::bulk(src, dst.as_ptr(), dst.len()) {
        // SAFETY: `src` is valid for `dst.len()` bytes (the caller's promise); `dst` is a
        // live exclusive slice outside shared memory (held as `&mut`).
        unsafe { bulk::copy(how, src, dst.as_mut_ptr(), dst.len()) };
        return;
    }
    load_words(src.cast_mut(), dst);
}

/// Loads `dst.len()` bytes from `src` (valid for that many) with relaxed atomics, as
/// `store_words` stores them.
fn load_words(src: *mut u8, dst: &mut [u8]) {
    let head = src.align_offset(8).min(dst.len());
    let (bytes, rest) = dst.split_at_mut(head);
    let n_words = rest.len() & !7;
    let (words, tail) = rest.split_at_mut(n_words);
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = byte_at(src, i).load(Relaxed);
    }
    for (i, w) in words.chunks_exact_mut(8).enumerate() {
        w.copy_from_slice(&word_at(src, head + 8 * i).load(Relaxed).to_ne_bytes());
    }
    for (i, b) in tail.iter_mut().enumerate() {
        *b = byte_at(src, head + n_words + i).load(Relaxed);
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

    /// Copies whose destination lies just past their source modulo 4 KiB, which `rep movsb`
    /// leaves to the word loops (`bulk::aliased`), and all others: the bytes are exact.
    #[test]
    fn copies_at_every_aliasing_gap_are_exact() {
        let b = SharedBuffer::new(3 * 4096).unwrap();
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 13 % 251) as u8).collect();
        let mut plain = vec![0u8; 3 * 4096];
        for gap in [0, 1, 4, 12, 28, 31, 32, 64, 4084] {
            // Into the buffer at 4096 from `plain` at the offset that makes `gap`.
            let dst = b.range_start(4096, 4096).unwrap() as usize;
            let at = (plain.as_ptr() as usize..)
                .take(4096)
                .position(|s| dst.wrapping_sub(s) % 4096 == gap);
            let at = at.unwrap();
            #[cfg(target_arch = "x86_64")]
            assert_eq!(
                bulk::aliased(plain[at..].as_ptr(), dst as *const u8),
                gap > 0 && gap < bulk::ALIASED_GAP
            );
            plain[at..at + 4096].copy_from_slice(&data);
            assert!(b.write(4096, &plain[at..at + 4096]));
            // And back out, to the offset that makes the same gap the other way.
            let back = (plain.as_ptr() as usize..)
                .take(4096)
                .position(|d| d.wrapping_sub(dst) % 4096 == gap)
                .unwrap();
            let out = &mut plain[back..back + 4096];
            out.fill(0);
            assert!(b.read(4096, out));
            assert_eq!(out, &data[..], "gap {gap}");
        }
    }

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
    fn unaligned_copies_of_every_length_round_trip() {
        let b = SharedBuffer::new(64).unwrap();
        let data: Vec<u8> = (1..=40).collect();
        for off in 0..9 {
            for len in 0..=data.len() {
                b.write(0, &[0; 64]);
                assert!(b.write(off, &data[..len]));
                let mut out = vec![0u8; len + 2];
                assert!(b.read(off, &mut out[1..=len]));
                assert_eq!(&out[1..=len], &data[..len], "off {off} len {len}");
                let mut whole = [0u8; 64];
                b.read(0, &mut whole);
                assert!(whole[..off].iter().all(|&x| x == 0));
                assert!(whole[off + len..].iter().all(|&x| x == 0));
                // SAFETY: no other thread touches `b`.
                assert_eq!(unsafe { b.slice(off, len) }.unwrap(), &data[..len]);
            }
        }
        // SAFETY: as above.
        assert!(unsafe { b.slice(60, 5) }.is_none());
        let empty = SharedBuffer::new(0).unwrap();
        assert!(empty.write(0, &[]));
        assert!(!empty.write(0, &[1]));
    }

    #[test]
    fn racing_copies_are_defined_and_whole_words_stay_whole() {
        // One thread writes all-ones or all-twos. Short copies (word by word) keep words
        // whole; long ones (bulk copies on x86-64) move only bytes that were written.
        for len in [64, 256, 4096] {
            let b = std::sync::Arc::new(SharedBuffer::new(len + 8).unwrap());
            b.write(0, &vec![1; len + 8]);
            let w = b.clone();
            let writer = std::thread::spawn(move || {
                for i in 0..2000u32 {
                    w.write(8, &vec![(i % 2 + 1) as u8; len]);
                }
            });
            let mut out = vec![0u8; len];
            for _ in 0..2000 {
                b.read(8, &mut out);
                if len < bulk::BULK_MIN {
                    for word in out.chunks(8) {
                        assert!(word.iter().all(|&x| x == word[0]), "{word:?}");
                    }
                }
                assert!(out.iter().all(|&x| x == 1 || x == 2));
            }
            writer.join().unwrap();
        }
    }

    #[test]
    fn the_last_byte_of_a_write_lands_last() {
        // Write k fills every byte with k; a reader that sees k in the last byte must see
        // at least k in the others (ib_write_lat waits on the last byte). The writer pauses
        // between writes so that the reader samples every one many times.
        for len in [100, 4096] {
            let b = std::sync::Arc::new(SharedBuffer::new(len).unwrap());
            let start = std::sync::Arc::new(std::sync::Barrier::new(2));
            let (w, go) = (b.clone(), start.clone());
            let writer = std::thread::spawn(move || {
                go.wait();
                for k in 1..=250u8 {
                    w.write(0, &vec![k; len]);
                    let t = std::time::Instant::now();
                    while t.elapsed() < std::time::Duration::from_micros(20) {}
                }
            });
            start.wait();
            // The byte before the last word: a forward copy stores it last but for that word.
            let (mut before, mut last) = ([0u8], [0u8]);
            while last[0] < 250 {
                b.read(len - 1, &mut last);
                b.read(len - 9, &mut before);
                assert!(
                    before[0] >= last[0],
                    "last byte {} seen before byte len - 9",
                    last[0]
                );
            }
            writer.join().unwrap();
        }
    }

    #[test]
    fn long_reads_of_every_alignment_round_trip() {
        let b = SharedBuffer::new(8192).unwrap();
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        for off in [0, 1, 7, 8, 4095] {
            for len in [511, 512, 513, 4096, 5000 - off] {
                b.write(0, &[0; 8192]);
                assert!(b.write(off, &data[..len]));
                let mut out = vec![0u8; len];
                assert!(b.read(off, &mut out));
                assert_eq!(out, &data[..len], "off {off} len {len}");
            }
        }
        let mut out = vec![0u8; 600];
        assert!(!b.read(8192 - 599, &mut out), "one byte past the end");
    }
}
