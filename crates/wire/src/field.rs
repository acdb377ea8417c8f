//! Big-endian field access for fixed-offset headers. Callers check lengths first.
//!
//! Each is `#[inline]`: the header views are generic, so their accessors are compiled in
//! the crates that use them, and without it every field read or written was a call.

/// The first `N` bytes of `b`, as an array: the fields read from it need no bounds checks.
/// Panics if `b` is shorter (as the header views' accessors do).
#[inline]
pub(crate) fn fixed<const N: usize>(b: &[u8]) -> &[u8; N] {
    b.first_chunk()
        .expect("header shorter than its fixed length")
}

/// [`fixed`] for writing.
#[inline]
pub(crate) fn fixed_mut<const N: usize>(b: &mut [u8]) -> &mut [u8; N] {
    b.first_chunk_mut()
        .expect("header shorter than its fixed length")
}

#[inline]
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
pub(crate) fn u24_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

#[inline]
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(w)
}

#[inline]
pub(crate) fn set_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn set_u24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

#[inline]
pub(crate) fn set_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn set_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Declares a zero-copy header view `$name<T: AsRef<[u8]>>` of `$len` bytes with the
/// constructors every header shares.
macro_rules! header_view {
    ($(#[$doc:meta])* $name:ident, $len:expr, $label:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Header length in bytes.
            pub const LEN: usize = $len;

            /// Wraps `buffer`; accessors panic if it is shorter than [`Self::LEN`].
            pub fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }
            /// Wraps `buffer` after checking its length.
            pub fn new_checked(buffer: T) -> $crate::error::Result<Self> {
                $crate::error::need($label, buffer.as_ref(), Self::LEN)?;
                Ok($name { buffer })
            }
            /// The wrapped buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
            #[allow(dead_code)]
            fn b(&self) -> &[u8] {
                self.buffer.as_ref()
            }
        }

        impl<T: AsRef<[u8]> + AsMut<[u8]>> $name<T> {
            #[allow(dead_code)]
            fn m(&mut self) -> &mut [u8] {
                self.buffer.as_mut()
            }
        }
    };
}
pub(crate) use header_view;
