/* The port and its GID table from C, as rxe reports them for an Ethernet device: an
 * active port with link layer Ethernet and one P_Key; one GID, RoCE v2, the device's
 * address, whose entry (ibv_query_gid_ex, ibv_query_gid_table) names the interface that
 * holds it (loopback here); what lies beyond the table answers as rdma-core does.
 * Prints "PASS <case>" per case; exits 1 at the first failure.
 */
#include "common.h"
#include <errno.h>
#include <net/if.h>

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0, "no RDMA device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");

	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "ibv_query_port");
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
		      pa.gid_tbl_len == 1 && pa.pkey_tbl_len == 1 &&
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
