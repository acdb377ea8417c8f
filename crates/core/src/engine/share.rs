//! The window the sending QPs of a device share on a short path.
//!
//! On a LAN or a loopback every RC QP may keep `WINDOW` (512) PSNs in flight: what one QP
//! needs to fill the path. Many QPs at once each kept as much, and it all stood in the one
//! queue in front of the receiving engine (its socket): 64 QPs of 64 KiB WRITEs on
//! loopback measured a smoothed RTT of 37-46 ms (2.6 ms shared), for no more bandwidth
//! than one QP's at 0.5 ms. So the QPs with work outstanding share `HOST_WINDOW` PSNs:
//! each gets an equal part, at most `WINDOW` (up to four QPs nothing changes) and at
//! least `SHARE_MIN`. On a long path the window grows from the delivery rate above its
//! part as before.

use crate::qp::Qp;

/// PSNs in flight over all the sending QPs of a device (8 MiB at a 4 KiB MTU, 2 MiB at 1 KiB).
pub(crate) const HOST_WINDOW: u32 = 2048;
/// The least share: a QP among thousands still sends a burst.
const SHARE_MIN: u32 = 16;

/// How many QPs have work outstanding, and so the share each gets.
#[derive(Debug, Default)]
pub(crate) struct Sharing {
    senders: u32,
}

impl Sharing {
    /// After an event on `qp`: counts it while its send queue holds work, and hands it the
    /// share as it stands.
    pub(crate) fn update(&mut self, qp: &mut Qp) {
        let sending = qp.sending();
        if sending != qp.counted_sending {
            qp.counted_sending = sending;
            if sending {
                self.senders += 1;
            } else {
                self.senders -= 1;
            }
        }
        qp.set_window_share(self.share());
    }

    /// `qp` is gone.
    pub(crate) fn forget(&mut self, qp: &Qp) {
        if qp.counted_sending {
            self.senders -= 1;
        }
    }

    fn share(&self) -> u32 {
        (HOST_WINDOW / self.senders.max(1)).max(SHARE_MIN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_window_is_split_evenly_down_to_the_least_share() {
        let mut s = Sharing::default();
        assert_eq!(s.share(), HOST_WINDOW);
        s.senders = 4;
        assert_eq!(s.share(), 512);
        s.senders = 64;
        assert_eq!(s.share(), 32);
        s.senders = 10_000;
        assert_eq!(s.share(), SHARE_MIN);
    }
}
