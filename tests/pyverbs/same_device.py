"""Two contexts of one device in one process, through rdma-core's Python bindings, as
rdma-core's own test suite sets them up: each connects its QP to its own GID. Checks an RC
FETCH_AND_ADD, a memory window bound with LOCAL_WRITE | REMOTE_WRITE (type 1 by
ibv_bind_mw, type 2 by a BIND_MW work request) and written through, and a UD SEND.
Prints PASS per case; exits 1 at the first failure."""
import sys
import time

import pyverbs.enums as e
from pyverbs.addr import AH, AHAttr, GlobalRoute
from pyverbs.cq import CQ
from pyverbs.device import Context
from pyverbs.mr import MR, MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from pyverbs.wr import SGE, RecvWR, SendWR

DEV = sys.argv[1] if len(sys.argv) > 1 else "oxr0"
REMOTE = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | \
    e.IBV_ACCESS_REMOTE_READ | e.IBV_ACCESS_REMOTE_ATOMIC


def fail(msg):
    print(f"FAIL {msg}")
    sys.exit(1)


def poll(cq, what):
    end = time.time() + 10
    while time.time() < end:
        n, wcs = cq.poll()
        if n:
            if wcs[0].status != e.IBV_WC_SUCCESS:
                fail(f"{what}: completion status {wcs[0].status}")
            return wcs[0]
    fail(f"{what}: no completion within 10 s")


class Side:
    def __init__(self, qp_type, mr_access=REMOTE):
        self.ctx = Context(name=DEV)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 64)
        self.mr = MR(self.pd, 4096, mr_access)
        cap = QPCap(max_send_wr=16, max_recv_wr=16, max_send_sge=1, max_recv_sge=1)
        self.qp = QP(self.pd, QPInitAttr(qp_type=qp_type, scq=self.cq, rcq=self.cq, cap=cap))

    def connect_rc(self, remote_qpn, access=REMOTE):
        """INIT, RTR, RTS toward `remote_qpn` at this context's own GID (pyverbs' to_rts)."""
        gr = GlobalRoute(dgid=self.ctx.query_gid(1, 0), sgid_index=0)
        qa = QPAttr(port_num=1)
        qa.ah_attr = AHAttr(port_num=1, is_global=1, gr=gr, dlid=0)
        qa.dest_qp_num = remote_qpn
        qa.path_mtu = e.IBV_MTU_1024
        qa.max_rd_atomic = qa.max_dest_rd_atomic = 1
        qa.timeout, qa.retry_cnt, qa.rnr_retry = 14, 7, 7
        qa.qp_access_flags = access
        self.qp.to_rts(qa)


def rc_fetch_and_add():
    probe = Context(name=DEV)
    probe.query_device()
    probe.close()
    a, b = Side(e.IBV_QPT_RC), Side(e.IBV_QPT_RC)
    if str(a.ctx.query_gid(1, 0)) != str(b.ctx.query_gid(1, 0)):
        fail("two contexts of one device report different GIDs")
    a.connect_rc(b.qp.qp_num)
    b.connect_rc(a.qp.qp_num)
    b.mr.write((40).to_bytes(8, "little"), 8)
    wr = SendWR(opcode=e.IBV_WR_ATOMIC_FETCH_AND_ADD, num_sge=1, sg=[SGE(a.mr.buf, 8, a.mr.lkey)])
    wr.set_wr_atomic(rkey=b.mr.rkey, addr=b.mr.buf, compare_add=2)
    a.qp.post_send(wr)
    poll(a.cq, "FETCH_AND_ADD")
    old, new = int.from_bytes(a.mr.read(8, 0), "little"), int.from_bytes(b.mr.read(8, 0), "little")
    if (old, new) != (40, 42):
        fail(f"FETCH_AND_ADD: returned {old}, target now {new}")
    print("PASS rc fetch_and_add between two contexts of one device")


def window(mw_type):
    mr_access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND
    a, b = Side(e.IBV_QPT_RC, mr_access), Side(e.IBV_QPT_RC, mr_access)
    qp_access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
    a.connect_rc(b.qp.qp_num, qp_access)
    b.connect_rc(a.qp.qp_num, qp_access)
    mw = MW(b.pd, mw_type)
    info = MWBindInfo(b.mr, b.mr.buf, 4096, e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_LOCAL_WRITE)
    if mw_type == e.IBV_MW_TYPE_1:
        b.qp.bind_mw(mw, MWBind(info, e.IBV_SEND_SIGNALED))
        poll(b.cq, "bind type 1")
        rkey = mw.rkey
    else:
        bind = SendWR(opcode=e.IBV_WR_BIND_MW)
        bind.set_bind_wr(mw, info)
        b.qp.post_send(bind)
        poll(b.cq, "bind type 2")
        rkey = bind.rkey
    a.mr.write(b"through the window", 18)
    wr = SendWR(opcode=e.IBV_WR_RDMA_WRITE, num_sge=1, sg=[SGE(a.mr.buf, 18, a.mr.lkey)])
    wr.set_wr_rdma(rkey, b.mr.buf + 100)
    a.qp.post_send(wr)
    poll(a.cq, "WRITE through the window")
    if b.mr.read(18, 100) != b"through the window":
        fail("WRITE through the window: wrong bytes")
    mw.close()
    print(f"PASS memory window type {mw_type} bound with LOCAL_WRITE | REMOTE_WRITE")


def ud_send():
    a, b = Side(e.IBV_QPT_UD), Side(e.IBV_QPT_UD)
    for s in (a, b):
        qa = QPAttr(port_num=1)
        qa.qkey = 0x11111111
        s.qp.to_rts(qa)
    gr = GlobalRoute(dgid=a.ctx.query_gid(1, 0), sgid_index=0)
    ah = AH(a.pd, attr=AHAttr(port_num=1, is_global=1, gr=gr, dlid=0))
    b.qp.post_recv(RecvWR(num_sge=1, sg=[SGE(b.mr.buf, 40 + 1024, b.mr.lkey)]))
    data = bytes(i * 7 % 256 for i in range(1024))
    a.mr.write(data, 1024)
    wr = SendWR(opcode=e.IBV_WR_SEND, num_sge=1, sg=[SGE(a.mr.buf, 1024, a.mr.lkey)])
    wr.set_wr_ud(ah, b.qp.qp_num, 0x11111111)
    a.qp.post_send(wr)
    poll(a.cq, "UD SEND")
    wc = poll(b.cq, "UD RECV")
    if wc.byte_len != 40 + 1024 or b.mr.read(1024, 40) != data:
        fail(f"UD RECV: {wc.byte_len} bytes, or wrong bytes")
    print("PASS ud send between two contexts of one device")


rc_fetch_and_add()
window(e.IBV_MW_TYPE_1)
window(e.IBV_MW_TYPE_2)
ud_send()
