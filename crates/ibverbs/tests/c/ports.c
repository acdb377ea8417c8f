/* The device, the port and its GID table from C: ibv_query_device_ex as rxe fills it
 * (the capability flags in 64 bits, the port count, nothing of what is not offered); as rxe reports them for an Ethernet device: an
 * active port with link layer Ethernet and one P_Key; one GID, RoCE v2, the device's
 * address, whose entry (ibv_query_gid_ex, ibv_query_gid_table) names the interface that
 * holds it (loopback here); what lies beyond the table answers as rdma-core does.
 * Prints "PASS <case>" per case; exits 1 at the first failure.
 */
#include "common.h"
#include <errno.h>
#include <inttypes.h>
#include <net/if.h>

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0, "no RDMA device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");

	struct ibv_device_attr da;
	struct ibv_device_attr_ex ax;
	memset(&ax, 0xee, sizeof(ax));
	CHECK(ibv_query_device(ctx, &da) == 0, "ibv_query_device");
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0, "ibv_query_device_ex");
	struct ibv_device_attr *o = &ax.orig_attr;
	CHECK(strcmp(o->fw_ver, da.fw_ver) == 0 && o->node_guid == da.node_guid &&
		      o->max_mr_size == da.max_mr_size && o->max_qp == da.max_qp &&
		      o->max_qp_wr == da.max_qp_wr && o->device_cap_flags == da.device_cap_flags &&
		      o->max_cqe == da.max_cqe && o->max_mw == da.max_mw &&
		      o->atomic_cap == da.atomic_cap && o->max_srq_wr == da.max_srq_wr &&
		      o->phys_port_cnt == 1 && da.phys_port_cnt == 1,
	      "orig_attr is ibv_query_device's");
	CHECK(ax.device_cap_flags_ex == da.device_cap_flags && ax.phys_port_cnt_ex == 1 &&
		      ax.comp_mask == 0 && ax.odp_caps.general_caps == 0 && ax.max_dm_size == 0 &&
		      ax.tso_caps.max_tso == 0 && ax.raw_packet_caps == 0,
	      "extended: flags %" PRIx64 " ports %u", ax.device_cap_flags_ex, ax.phys_port_cnt_ex);
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	CHECK(ibv_query_device_ex(ctx, &in, &ax) == EINVAL, "an unknown input mask");
	printf("PASS ibv_query_device_ex: the attributes, flags in 64 bits, one port\n");

	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "ibv_query_port");
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
		      pa.gid_tbl_len == 1024 && pa.pkey_tbl_len == 1 &&
		      pa.active_mtu >= IBV_MTU_1024 && pa.active_mtu <= pa.max_mtu,
	      "port: state %d link %d gids %d pkeys %d mtu %d/%d", pa.state, pa.link_layer,
	      pa.gid_tbl_len, pa.pkey_tbl_len, pa.active_mtu, pa.max_mtu);
	CHECK(ibv_query_port(ctx, 2, &pa) == EINVAL, "port 2");
	uint16_t pkey;
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == 0xffff, "P_Key 0: %x", pkey);
	printf("PASS port 1 active, Ethernet, one GID, P_Key 0xffff; port 2 EINVAL\n");

	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");
	static const uint8_t v4mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	CHECK(memcmp(gid.raw, v4mapped, 12) == 0 && gid.raw[12] == 127,
	      "GID 0 is the IPv4-mapped loopback address");
	printf("PASS GID 0 is the device's address\n");

	struct ibv_gid_entry e;
	memset(&e, 0xee, sizeof(e));
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &e, 0) == 0, "ibv_query_gid_ex");
	unsigned lo = if_nametoindex("lo");
	CHECK(lo != 0, "if_nametoindex(lo)");
	CHECK(memcmp(e.gid.raw, gid.raw, 16) == 0 && e.gid_index == 0 && e.port_num == 1 &&
		      e.gid_type == IBV_GID_TYPE_ROCE_V2 && e.ndev_ifindex == lo,
	      "entry: index %u port %u type %u ifindex %u (lo is %u)", e.gid_index, e.port_num,
	      e.gid_type, e.ndev_ifindex, lo);
	CHECK(ibv_query_gid_ex(ctx, 1, 1, &e, 0) == ENODATA, "GID 1: ENODATA");
	CHECK(ibv_query_gid_ex(ctx, 2, 0, &e, 0) == EINVAL, "port 2: EINVAL");
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &e, 1) == EINVAL, "unknown flags: EINVAL");
	printf("PASS ibv_query_gid_ex: the entry names the interface (lo); beyond it ENODATA\n");

	struct ibv_gid_entry t[4];
	memset(t, 0, sizeof(t));
	ssize_t got = ibv_query_gid_table(ctx, t, 4, 0);
	CHECK(got == 1 && memcmp(t[0].gid.raw, gid.raw, 16) == 0 && t[0].ndev_ifindex == lo &&
		      t[0].gid_type == IBV_GID_TYPE_ROCE_V2,
	      "ibv_query_gid_table: %zd", got);
	CHECK(ibv_query_gid_table(ctx, t, 0, 0) == -EINVAL, "no room: -EINVAL");
	CHECK(ibv_query_gid_table(ctx, t, 4, 1) == -EINVAL, "unknown flags: -EINVAL");
	printf("PASS ibv_query_gid_table: one entry; no room or unknown flags -EINVAL\n");

	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	ibv_free_device_list(list);
	return 0;
}
