//! What a connection has mapped for its peer's `riowrite` (`iomap.rs` makes and sends
//! the mappings).

use crate::MemoryRegion;
use std::collections::VecDeque;

#[derive(Debug)]
pub(super) struct Mapping {
    pub mr: MemoryRegion,
    pub offset: u64,
}

/// A connection's mappings.
#[derive(Debug)]
pub(super) struct IoMaps {
    /// Entries of this side's table (for the peer's mappings).
    local: u32,
    /// Writable mappings by their slot in the peer's table.
    pub slots: Vec<Option<Mapping>>,
    /// Slots still to be written to the peer.
    pub pending: VecDeque<usize>,
    /// Mappings the peer may not write (registered, never sent).
    pub other: Vec<Mapping>,
}

impl IoMaps {
    pub fn new(local: u32) -> IoMaps {
        IoMaps {
            local,
            slots: Vec::new(),
            pending: VecDeque::new(),
            other: Vec::new(),
        }
    }

    pub fn local_size(&self) -> u32 {
        self.local
    }
}
