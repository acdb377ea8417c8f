//! What the API tests share.

use oxrdma::{CompletionQueue, WorkCompletion};
use std::time::{Duration, Instant};

/// The next `n` completions of `cq`, polled for (at most 20 s).
pub fn wait(cq: &CompletionQueue, n: usize) -> Vec<WorkCompletion> {
    let mut wcs = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while wcs.len() < n {
        assert!(Instant::now() < deadline, "{} of {n}: {wcs:?}", wcs.len());
        let want = n - wcs.len();
        cq.poll(&mut wcs, want).unwrap();
    }
    wcs
}
