//! Any bytes as the stream an iWARP QP reads (`oxrdma_core::iwarp::qp`): whatever comes,
//! nothing panics, nothing is placed outside the buffers the STags name, no work request
//! completes twice, and once the QP has ended the stream it takes nothing more.
#![no_main]

use libfuzzer_sys::fuzz_target;
use oxrdma_core::iwarp::qp::{Buffers, Qp, QpConfig};
use oxrdma_core::{RecvWr, SendData, SendFlags, SendWr, Sge, WrOpcode};
use std::collections::HashSet;

fuzz_target!(|data: &[u8]| {
    let Some((&first, stream)) = data.split_first() else {
        return;
    };
    // Two 4 KiB buffers: key 1 at 0x1000 (remotely writable and readable), key 2 at
    // 0x9000 (local only).
    let mut mem = Buffers::default();
    mem.add(1, 0x1000, vec![0; 4096], true, true);
    mem.add(2, 0x9000, vec![0; 4096], false, false);
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
