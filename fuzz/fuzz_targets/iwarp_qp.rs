//! Any bytes as the stream an iWARP QP reads (`oxrdma_core::iwarp::qp`): whatever comes,
//! nothing panics, nothing is placed outside the buffers the STags name, no work request
//! completes twice, and once the QP has ended the stream it takes nothing more.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxrdma_core::iwarp::qp::{AccessError, Memory, Qp, QpConfig};
use oxrdma_core::{RecvWr, SendData, SendFlags, SendWr, Sge, WcStatus, WrOpcode};
use std::cell::RefCell;
use std::collections::HashSet;

/// Two 4 KiB buffers: key 1 at 0x1000 (local and remotely writable and readable), key 2
/// at 0x9000 (local only). The same number is lkey and STag.
struct Mem {
    bufs: [RefCell<Vec<u8>>; 2],
}

impl Mem {
    fn at(&self, key: u32, addr: u64, len: usize) -> Option<(usize, usize)> {
        let (i, base) = match key {
            1 => (0, 0x1000u64),
            2 => (1, 0x9000u64),
            _ => return None,
        };
        let off = usize::try_from(addr.checked_sub(base)?).ok()?;
        (off.checked_add(len)? <= 4096).then_some((i, off))
    }
    fn sg(
        &self,
        sges: &[Sge],
        at: usize,
        len: usize,
        mut f: impl FnMut(usize, usize, usize, usize),
    ) -> Result<(), WcStatus> {
        let (mut at, mut done) = (at, 0);
        for s in sges {
            let (i, off) = self
                .at(s.lkey, s.addr, s.length as usize)
                .ok_or(WcStatus::LocProtErr)?;
            if at >= s.length as usize {
                at -= s.length as usize;
                continue;
            }
            let n = (s.length as usize - at).min(len - done);
            f(i, off + at, done, n);
            done += n;
            at = 0;
        }
        if done < len {
            Err(WcStatus::LocLenErr)
        } else {
            Ok(())
        }
    }
}

impl Memory for Mem {
    fn gather(&self, sges: &[Sge], at: usize, out: &mut [u8]) -> Result<(), WcStatus> {
        let len = out.len();
        self.sg(sges, at, len, |i, off, d, n| {
            out[d..d + n].copy_from_slice(&self.bufs[i].borrow()[off..off + n])
        })
    }
    fn scatter(&self, sges: &[Sge], at: usize, data: &[u8]) -> Result<(), WcStatus> {
        self.sg(sges, at, data.len(), |i, off, d, n| {
            self.bufs[i].borrow_mut()[off..off + n].copy_from_slice(&data[d..d + n])
        })
    }
    fn place(&self, stag: u32, to: u64, data: &[u8]) -> Result<(), AccessError> {
        let (i, off) = self.at(stag, to, data.len()).ok_or(AccessError::Bounds)?;
        if i != 0 {
            return Err(AccessError::Rights);
        }
        self.bufs[i].borrow_mut()[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn fetch(&self, stag: u32, to: u64, out: &mut [u8]) -> Result<(), AccessError> {
        let (i, off) = self
            .at(stag, to, out.len())
            .ok_or(AccessError::InvalidStag)?;
        out.copy_from_slice(&self.bufs[i].borrow()[off..off + out.len()]);
        Ok(())
    }
    fn invalidate(&mut self, stag: u32) -> Result<(), AccessError> {
        if stag == 1 {
            Ok(())
        } else {
            Err(AccessError::InvalidStag)
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, stream)) = data.split_first() else {
        return;
    };
    let mut mem = Mem {
        bufs: [RefCell::new(vec![0; 4096]), RefCell::new(vec![0; 4096])],
    };
    let mut qp = Qp::new(QpConfig {
        qpn: 1,
        max_fpdu: 64 + usize::from(first) * 8,
        crc: first & 1 == 1,
        ord: 2,
        ird: 2,
        sq_sig_all: true,
    });
    // Receives into both buffers and a READ waiting for its response, so SENDs and READ
    // responses have somewhere to go.
    for (id, key, base) in [(10u64, 1u32, 0x1000u64), (11, 2, 0x9000)] {
        qp.post_recv(RecvWr {
            wr_id: id,
            sges: vec![Sge {
                addr: base,
                length: 4096,
                lkey: key,
            }]
            .into(),
        });
    }
    let mut read = SendWr::new(
        20,
        WrOpcode::RdmaRead,
        SendData::Sges(
            vec![Sge {
                addr: 0x9000,
                length: 512,
                lkey: 2,
            }]
            .into(),
        ),
    );
    read.flags = SendFlags::SIGNALED;
    (read.remote_addr, read.rkey) = (0x5000, 7);
    qp.post_send(read).expect("a READ of one SGE is taken");
    let mut out = Vec::new();
    qp.transmit(&mem, &mut out, 1 << 16);
    // The stream in pieces the first byte decides.
    let step = usize::from(first % 31) + 1;
    for piece in stream.chunks(step) {
        let ended = qp.terminated();
        let took = qp.receive(piece, &mut mem);
        assert!(took <= piece.len());
        if ended {
            assert_eq!(took, piece.len(), "an ended stream drops what comes");
        }
        qp.transmit(&mem, &mut out, 1 << 16);
    }
    let mut seen = HashSet::new();
    while let Some(wc) = qp.poll_cq() {
        assert!(
            seen.insert(wc.wr_id),
            "work request {} completed twice",
            wc.wr_id
        );
        assert!([10, 11, 20].contains(&wc.wr_id));
    }
});
