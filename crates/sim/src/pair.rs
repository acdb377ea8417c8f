//! Two connected RC queue pairs on a simulated network, for tests and demos that drive the
//! engine by hand.

use crate::net::NetConfig;
use crate::world::World;
use oxrdma_core::{
    Access, AddressVector, Gid, MemoryRegion, Mtu, QpAttr, QpCap, QpInitAttr, QpState, QpType, Sge,
    SharedBuffer, WorkCompletion,
};
use std::sync::Arc;

/// Knobs of a [`Pair`]; `Default` gives a healthy connection.
#[derive(Debug, Clone)]
pub struct PairOptions {
    pub seed: u64,
    pub net: NetConfig,
    pub mtu: Mtu,
    pub buf_len: usize,
    /// Access of each end's memory region.
    pub mr_access: Access,
    /// Remote access each QP allows.
    pub qp_access: Access,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub cq_depth: u32,
    pub sq_sig_all: bool,
    pub cap: QpCap,
    pub qp_type: QpType,
    /// Q_Key of UD QPs.
    pub qkey: u32,
    /// Whether each end (a, b) speaks selective repeat; off, it behaves as rxe does.
    pub selective_repeat: [bool; 2],
    /// Each end's first PSN, instead of a random one.
    pub sq_psn: Option<[u32; 2]>,
    /// Whether each end (a, b) is secure (`oxrdma_core::secure`), with keys both derive
    /// from one secret: a pair works only if both are.
    pub secure: [bool; 2],
    pub suite: oxrdma_core::secure::Suite,
    /// Whether each end stays in RTR (as perftest's bandwidth servers leave their QPs): a
    /// secure one then has its receive and reply keys alone (`Engine::secure_qp_recv`).
    pub rtr_only: [bool; 2],
}

impl Default for PairOptions {
    fn default() -> Self {
        PairOptions {
            seed: 1,
            net: NetConfig::default(),
            mtu: Mtu::Mtu1024,
            buf_len: 1 << 20,
            mr_access: Access::ALL,
            qp_access: Access::ALL,
            timeout: 10,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            max_rd_atomic: 4,
            cq_depth: 1024,
            sq_sig_all: false,
            cap: QpCap::default(),
            qp_type: QpType::Rc,
            qkey: 0x1111_1111,
            selective_repeat: [true; 2],
            sq_psn: None,
            secure: [false; 2],
            suite: oxrdma_core::secure::Suite::Aes256Gcm,
            rtr_only: [false; 2],
        }
    }
}

/// One end: a QP with one CQ (send and receive) and one registered buffer.
#[derive(Debug)]
pub struct End {
    pub node: usize,
    pub pd: u32,
    pub cq: u32,
    pub qpn: u32,
    pub mr: MemoryRegion,
    pub buf: Arc<SharedBuffer>,
    pub sq_psn: u32,
    /// UD: an address handle towards the other end.
    pub ah: Option<u32>,
}

impl End {
    /// An SGE for `len` bytes at offset `off` of this end's buffer.
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        Sge {
            addr: self.mr.iova + off as u64,
            length: len as u32,
            lkey: self.mr.lkey,
        }
    }
    /// The address peers use for offset `off`.
    pub fn addr(&self, off: usize) -> u64 {
        self.mr.iova + off as u64
    }
    /// An RDMA WRITE of this end's first `len` bytes to the start of `to`'s buffer.
    pub fn write_to(&self, to: &End, wr_id: u64, len: usize) -> oxrdma_core::SendWr {
        use oxrdma_core::{SendData, SendWr, WrOpcode};
        SendWr {
            remote_addr: to.addr(0),
            rkey: to.mr.rkey,
            ..SendWr::new(
                wr_id,
                WrOpcode::RdmaWrite,
                SendData::Sges(vec![self.sge(0, len)].into()),
            )
        }
    }
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        assert!(self.buf.read(off, &mut v));
        v
    }
}

#[derive(Debug)]
pub struct Pair {
    pub world: World,
    pub a: End,
    pub b: End,
}

/// A QP of `o.qp_type` on `node`, with its PD, CQ and registered buffer.
pub fn end(world: &mut World, node: usize, o: &PairOptions) -> End {
    let e = &mut world.nodes[node].engine;
    let pd = e.alloc_pd().expect("pd");
    let cq = e.create_cq(o.cq_depth).expect("cq");
    let init = QpInitAttr {
        qp_type: o.qp_type,
        send_cq: cq,
        recv_cq: cq,
        cap: o.cap,
        sq_sig_all: o.sq_sig_all,
        srq: None,
    };
    let qpn = e.create_qp(pd, &init).expect("qp");
    let buf = Arc::new(SharedBuffer::new(o.buf_len).expect("buffer"));
    let mr = e.reg_mr(pd, buf.clone(), None, o.mr_access).expect("mr");
    let sq_psn = e.random_psn();
    End {
        node,
        pd,
        cq,
        qpn,
        mr,
        buf,
        sq_psn,
        ah: None,
    }
}

/// The three modify-QP calls that take a fresh QP of `o.qp_type` to RTS (towards `peer`
/// for RC and UC; UD has no peer).
pub fn connect_attrs(
    o: &PairOptions,
    peer_gid: Gid,
    peer_qpn: u32,
    peer_psn: u32,
    my_psn: u32,
) -> [QpAttr; 3] {
    let init = |access: Option<_>, qkey: Option<u32>| QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: access,
        qkey,
        ..Default::default()
    };
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(my_psn),
        ..Default::default()
    };
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        ah_attr: Some(AddressVector::to(peer_gid)),
        path_mtu: Some(o.mtu),
        dest_qp_num: Some(peer_qpn),
        rq_psn: Some(peer_psn),
        ..Default::default()
    };
    match o.qp_type {
        QpType::Ud => {
            return [
                init(None, Some(o.qkey)),
                QpAttr {
                    qp_state: Some(QpState::Rtr),
                    ..Default::default()
                },
                rts,
            ]
        }
        QpType::Uc => return [init(Some(o.qp_access), None), rtr, rts],
        QpType::Rc => {}
    }
    [
        QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: Some(o.qp_access),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rtr),
            ah_attr: Some(AddressVector::to(peer_gid)),
            path_mtu: Some(o.mtu),
            dest_qp_num: Some(peer_qpn),
            rq_psn: Some(peer_psn),
            max_dest_rd_atomic: Some(o.max_rd_atomic),
            min_rnr_timer: Some(o.min_rnr_timer),
            ..Default::default()
        },
        QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(my_psn),
            timeout: Some(o.timeout),
            retry_cnt: Some(o.retry_cnt),
            rnr_retry: Some(o.rnr_retry),
            max_rd_atomic: Some(o.max_rd_atomic),
            ..Default::default()
        },
    ]
}

/// Takes `a` and `b` (on their nodes) to RTS, each towards the other.
pub fn connect(world: &mut World, o: &PairOptions, a: &mut End, b: &mut End) {
    let gid = |w: &World, n: usize| Gid::from(w.nodes[n].ip);
    let (ga, gb) = (gid(world, a.node), gid(world, b.node));
    let ends = [(&*a, ga, &*b, gb), (&*b, gb, &*a, ga)];
    for (i, (me, my_gid, peer, peer_gid)) in ends.into_iter().enumerate() {
        let engine = &mut world.nodes[me.node].engine;
        let attrs = connect_attrs(o, peer_gid, peer.qpn, peer.sq_psn, me.sq_psn);
        for (n, attr) in attrs.iter().enumerate() {
            // Keys go in between INIT and RTR.
            if n == 1 && o.secure[i] {
                use oxrdma_core::secure::{derive, End as KeyEnd};
                let end = |gid, e: &End| KeyEnd {
                    gid,
                    qpn: e.qpn,
                    psn: e.sq_psn,
                };
                let keys = derive(
                    o.suite,
                    b"pair secret",
                    &end(my_gid, me),
                    &end(peer_gid, peer),
                );
                if o.rtr_only[i] {
                    let (recv, reply) = (&keys.recv, &keys.reply_send);
                    engine
                        .secure_qp_recv(me.qpn, o.suite, recv, reply)
                        .expect("keys");
                } else {
                    engine.secure_qp(me.qpn, &keys).expect("secure_qp");
                }
            }
            if n == 2 && o.rtr_only[i] {
                break;
            }
            engine.modify_qp(me.qpn, attr).expect("modify");
        }
    }
    if o.qp_type == QpType::Ud {
        let av = |g| AddressVector::to(g);
        a.ah = Some(
            world.nodes[a.node]
                .engine
                .create_ah(a.pd, av(gb))
                .expect("ah"),
        );
        b.ah = Some(
            world.nodes[b.node]
                .engine
                .create_ah(b.pd, av(ga))
                .expect("ah"),
        );
    }
}

impl Pair {
    /// Two nodes, one QP each, connected and in RTS.
    pub fn new(o: &PairOptions) -> Pair {
        let mut world = World::new(2, o.net.clone(), o.seed);
        for (node, on) in world.nodes.iter_mut().zip(o.selective_repeat) {
            node.engine.set_selective_repeat(on);
        }
        let (mut a, mut b) = (end(&mut world, 0, o), end(&mut world, 1, o));
        if let Some([pa, pb]) = o.sq_psn {
            (a.sq_psn, b.sq_psn) = (pa, pb);
        }
        connect(&mut world, o, &mut a, &mut b);
        Pair { world, a, b }
    }

    /// Another pair of QPs between the same two nodes, each with its own PD, CQ and buffer,
    /// connected and in RTS.
    pub fn another(&mut self, o: &PairOptions) -> (End, End) {
        let (mut a, mut b) = (end(&mut self.world, 0, o), end(&mut self.world, 1, o));
        connect(&mut self.world, o, &mut a, &mut b);
        (a, b)
    }

    /// Runs until the network and the timers are quiet (at most 100 s of virtual time).
    pub fn run(&mut self) {
        let limit = self.world.now + 100_000_000_000;
        self.world.run_until_idle(limit);
    }

    /// Posts a send WR on node `n`'s QP (0 = a, 1 = b); panics if the engine refuses it.
    pub fn post_send(&mut self, n: usize, wr: oxrdma_core::SendWr) {
        let qpn = if n == 0 { self.a.qpn } else { self.b.qpn };
        self.world.nodes[n]
            .engine
            .post_send(qpn, wr)
            .expect("post_send");
    }

    /// Posts a receive of `sges` with `wr_id` on node `n`'s QP.
    pub fn post_recv(&mut self, n: usize, wr_id: u64, sges: Vec<Sge>) {
        let qpn = if n == 0 { self.a.qpn } else { self.b.qpn };
        let wr = oxrdma_core::RecvWr {
            wr_id,
            sges: sges.into(),
        };
        self.world.nodes[n]
            .engine
            .post_recv(qpn, wr)
            .expect("post_recv");
    }

    /// Takes every completion of node `n`'s CQ.
    pub fn wcs(&mut self, n: usize) -> Vec<WorkCompletion> {
        let cq = if n == 0 { self.a.cq } else { self.b.cq };
        self.world.nodes[n]
            .engine
            .poll_cq(cq, usize::MAX)
            .expect("cq")
    }
}
