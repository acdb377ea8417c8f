//! Completion queues: fixed depth; overflow puts the CQ in error and raises an async event,
//! but the completion is kept, never dropped.

use crate::wr::WorkCompletion;
use std::collections::VecDeque;

#[derive(Debug)]
pub(crate) struct Cq {
    pub depth: usize,
    pub entries: VecDeque<WorkCompletion>,
    /// Set once the CQ held more than `depth` entries.
    pub overflowed: bool,
}

impl Cq {
    pub fn new(depth: usize) -> Self {
        Cq {
            depth,
            entries: VecDeque::new(),
            overflowed: false,
        }
    }

    /// Adds a completion; returns true if this push overflowed the queue for the first time.
    pub fn push(&mut self, wc: WorkCompletion) -> bool {
        self.entries.push_back(wc);
        if self.entries.len() > self.depth && !self.overflowed {
            self.overflowed = true;
            return true;
        }
        false
    }
}
