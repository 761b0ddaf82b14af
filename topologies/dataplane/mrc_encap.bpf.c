// SPDX-License-Identifier: GPL-2.0
/* MRC host encapsulation: an lwt `xmit` program on each host NIC's route to its plane's NIC
 * addresses (fd00:0:0:<plane>::/64), loaded once per emulation and shared by every host.
 *
 * MRC leaves a host IPv6-in-IPv6, as in the MRC paper: the agent's path socket sends an ordinary
 * UDP datagram from its NIC's address to the peer NIC's address (the kernel writes the
 * checksum, and no hop ever rewrites what it covers) and marks the socket with the path's EV
 * (SO_MARK). This program looks (inner source, inner destination, EV) up in `mrc_paths` and
 * pushes an outer IPv6 header whose destination is that path's uSID carrier: version, traffic
 * class (ECN included) and flow label copied from the inner header, the same hop limit, the
 * inner source as outer source, next header 41 and no routing header (RFC 9800's reduced
 * encapsulation with one carrier). The kernel then routes the outer packet (BPF_LWT_REROUTE)
 * along the plane's uSID route; the receiving host decapsulates at its SID (End.DT6).
 *
 * Unmarked packets (the RoCE-like baseline, TCP, MPTCP, probes of anything else) pass as they
 * are: destination routing. A marked packet with no entry is dropped and counted: an MRC
 * packet never falls back to destination routing.
 *
 * The map key holds the sender's own address, so one load serves every host namespace.
 */
#include <linux/bpf.h>
#include <linux/in6.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define NEXTHDR_IPV6 41

struct path_key {
	struct in6_addr src;  /* the sending NIC's address (inner source) */
	struct in6_addr dst;  /* the receiving NIC's address (inner destination) */
	__u32 ev;             /* the path's EV = the socket's mark */
};

/* Filled from the fabric model before any host sends; entries allocated as they are added.
 * The loader makes this map at the fabric's path count and the program uses that one
 * (topologies/dataplane/encap.py, bpf.SizedMap): a hash map's buckets follow max_entries
 * whether used or not, so the ceiling here would cost 64 MB of them. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 22);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct path_key);
	__type(value, struct in6_addr);  /* the uSID carrier (outer destination) */
} mrc_paths SEC(".maps");

enum { ENCAPSULATED, PASSED, NO_PATH, ERROR, N_STATS };

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_STATS);
	__type(key, __u32);
	__type(value, __u64);
} mrc_encap_stats SEC(".maps");

static __always_inline void count(__u32 what)
{
	__u64 *v = bpf_map_lookup_elem(&mrc_encap_stats, &what);

	if (v)
		*v += 1;
}

SEC("lwt_xmit")
int mrc_encap(struct __sk_buff *skb)
{
	struct ipv6hdr inner;

	if (!skb->mark) {
		count(PASSED);
		return BPF_OK;
	}
	if (bpf_skb_load_bytes(skb, 0, &inner, sizeof(inner))) {
		count(ERROR);
		return BPF_DROP;
	}
	if (inner.version != 6 || inner.nexthdr == NEXTHDR_IPV6) {  /* already encapsulated */
		count(PASSED);
		return BPF_OK;
	}
	struct path_key key = { .src = inner.saddr, .dst = inner.daddr, .ev = skb->mark };
	struct in6_addr *carrier = bpf_map_lookup_elem(&mrc_paths, &key);

	if (!carrier) {
		count(NO_PATH);
		return BPF_DROP;
	}
	struct ipv6hdr outer = inner;  /* version, traffic class, flow label, hop limit, source */

	outer.payload_len = bpf_htons(skb->len);  /* the whole inner packet */
	outer.nexthdr = NEXTHDR_IPV6;
	outer.daddr = *carrier;
	if (bpf_lwt_push_encap(skb, BPF_LWT_ENCAP_IP, &outer, sizeof(outer))) {
		count(ERROR);
		return BPF_DROP;
	}
	count(ENCAPSULATED);
	return BPF_LWT_REROUTE;
}

char _license[] SEC("license") = "GPL";
