#!/bin/sh
# Makes siw0 (Linux soft-iWARP, built with the guest image) the guest's RDMA device on
# eth0, once: the kernel's RDMA CM binds an address to the first RDMA device on its
# interface, so rxe0 goes (the iWARP cases run last; a fresh guest has rxe0 again).
rdma link show siw0/1 >/dev/null 2>&1 && exit 0
rdma link delete rxe0 2>/dev/null
modprobe siw || { echo "modprobe siw failed"; exit 91; }
rdma link add siw0 type siw netdev eth0 || { echo "rdma link add siw0 failed"; exit 92; }
