// SPDX-License-Identifier: GPL-2.0
/* The SRv6 micro-SID behaviours at tc ingress, for kernels built without seg6local
 * (CONFIG_IPV6_SEG6_LWTUNNEL): what the kernel's own routes do where it has them
 * (controller/kernel_tables.py, topologies/hostnet.py), nothing more.
 *
 *   usid_end (every router port): a packet whose destination lies in the uSID block
 *     (USID_BLOCK/32) and which this router delivers locally (bpf_fib_lookup: the router's own
 *     /48 is a `local` route, from the same tables as the kernel's End route) gets uN, End with
 *     the NEXT-C-SID flavour (lblen 32, nflen 16): the uSIDs after the block move up one, the
 *     last becomes zero. The kernel then routes the new destination (and decrements the hop
 *     limit) as it routes any packet. An End whose carrier would then be empty is left to the
 *     kernel, which has no handler for it: dropped, as End drops a packet with no SRH.
 *   usid_decap (every host NIC): IPv6-in-IPv6 whose outer destination lies in the block loses
 *     its outer header (End.DT6; only the host's own leaf sends it carriers): the inner packet
 *     is then received as if it had come alone. ECN: the switches mark both headers.
 *
 * Transport checksums are untouched, as the kernel's uN leaves them (RFC 9800). Anything else
 * passes untouched. USID_BLOCK comes from topologies/numbering.py at build time.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef USID_BLOCK
#error "build with `python -m topologies.dataplane build`: the block comes from topologies/numbering.py"
#endif

#define AF_INET6 10
#define IPPROTO_IPV6_ENCAP 41
#define DST_OFF (ETH_HLEN + 24)  /* the IPv6 destination address */

/* The destination, when the frame is IPv6 with a destination in the block. A frame whose
 * headers are not all in the linear part (an AF_PACKET sender's, say) is pulled first. */
static __always_inline int carrier(struct __sk_buff *skb, struct ipv6hdr **ip6)
{
	void *data = (void *)(long)skb->data, *end = (void *)(long)skb->data_end;
	struct ethhdr *eth;

	if (data + ETH_HLEN + sizeof(struct ipv6hdr) > end) {
		if (bpf_skb_pull_data(skb, ETH_HLEN + sizeof(struct ipv6hdr)))
			return 0;
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
	}
	eth = data;

	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IPV6))
		return 0;
	*ip6 = (void *)(eth + 1);
	if ((void *)(*ip6 + 1) > end)
		return 0;
	return (*ip6)->daddr.in6_u.u6_addr32[0] == bpf_htonl(USID_BLOCK);
}

SEC("tc/usid_end")
int usid_end(struct __sk_buff *skb)
{
	struct bpf_fib_lookup fib = {};
	struct ipv6hdr *ip6;
	__u8 dst[16], shifted[16] = {};

	if (!carrier(skb, &ip6))
		return TC_ACT_OK;
	__builtin_memcpy(dst, &ip6->daddr, 16);
	fib.family = AF_INET6;
	fib.ifindex = skb->ingress_ifindex;
	__builtin_memcpy(fib.ipv6_src, &ip6->saddr, 16);
	__builtin_memcpy(fib.ipv6_dst, dst, 16);
	if (bpf_fib_lookup(skb, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_NOT_FWDED)
		return TC_ACT_OK;  /* not this router's uSID (or forwarding off: nothing leaves) */
	__builtin_memcpy(shifted, dst, 4);
#pragma unroll
	for (int i = 4; i < 14; i++)
		shifted[i] = dst[i + 2];
	if (!(shifted[4] | shifted[5]))
		return TC_ACT_OK;  /* no uSID after ours */
	if (bpf_skb_store_bytes(skb, DST_OFF, shifted, 16, BPF_F_RECOMPUTE_CSUM))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

SEC("tc/usid_decap")
int usid_decap(struct __sk_buff *skb)
{
	struct ipv6hdr *ip6;

	if (!carrier(skb, &ip6) || ip6->nexthdr != IPPROTO_IPV6_ENCAP)
		return TC_ACT_OK;
	if (bpf_skb_adjust_room(skb, -(__s32)sizeof(struct ipv6hdr), BPF_ADJ_ROOM_MAC, 0))
		return TC_ACT_SHOT;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
