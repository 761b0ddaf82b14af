// SPDX-License-Identifier: GPL-2.0
/* MRC switch egress: ECN marking, packet trimming and a priority class, for kernels without
 * RED/fq/netem (tc clsact egress, direct action, one object shared by every switch port).
 *
 * A per-port virtual queue drains at the port's configured rate (what HTB enforces on the real
 * queue). Above mark_bytes, ECN-capable packets get CE (never on the last hop to a host, as in
 * the MRC paper); above trim_bytes, MRC data packets are cut to their headers, flagged TRIMMED
 * and sent in the high-priority class; only what cannot be trimmed is dropped, above
 * drop_bytes. Control packets (SACK, NACK, probes, trimmed headers) always take the
 * high-priority class. Anything this program cannot parse passes through untouched.
 *
 * The MRC header offsets come from endpoints/wire.py at build time (-D flags from the Makefile).
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef MRC_PORT
#define MRC_PORT 4791
#endif
#ifndef MRC_HDR_LEN            /* bytes of MRC header kept by a trim (multiple of 4) */
#define MRC_HDR_LEN 32
#endif
#ifndef MRC_OPCODE_OFF         /* offset of the opcode byte in the MRC header */
#define MRC_OPCODE_OFF 0
#endif
#ifndef MRC_FLAGS_OFF          /* offset of the flags byte */
#define MRC_FLAGS_OFF 1
#endif
#ifndef MRC_FLAG_TRIMMED
#define MRC_FLAG_TRIMMED 0x04
#endif
#ifndef MRC_DATA_OPCODE_MAX    /* opcodes 0..MAX are data; the rest are control */
#define MRC_DATA_OPCODE_MAX 0x0f
#endif
#ifndef MRC_MAGIC_OFF          /* a magic/version byte, so foreign UDP/4791 is left alone */
#define MRC_MAGIC_OFF 2
#endif
#ifndef MRC_MAGIC
#define MRC_MAGIC 0x4d
#endif

#define HIGH_PRIO_CLASS 0x10002  /* HTB class 1:2, the control class */
#define DATA_CLASS 0x10003       /* HTB class 1:3 */
#define FLAG_LAST_HOP 1          /* port faces a host: no ECN marking */
#define FLAG_TRIM 2              /* trimming enabled (else drop-tail) */
#define L3_OFF ETH_HLEN
#define L4_OFF (ETH_HLEN + sizeof(struct ipv6hdr))
#define MRC_OFF (L4_OFF + sizeof(struct udphdr))

struct port_cfg {
	__u64 rate_bps;
	__u32 mark_bytes;
	__u32 trim_bytes;
	__u32 drop_bytes;
	__u32 flags;
};

struct port_state {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 vq_bytes;
	__u64 last_ns;
};

struct port_counters {
	__u64 packets;
	__u64 bytes;
	__u64 marked;
	__u64 trimmed;
	__u64 dropped;
	__u64 control;
	__u64 vq_max;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);  /* ifindex */
	__type(value, struct port_cfg);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mrc_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct port_state);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mrc_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct port_counters);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
} mrc_counters SEC(".maps");

static __always_inline __u16 csum_fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* Cut an MRC data packet to its headers, flag it TRIMMED and fix lengths and checksum. */
static __always_inline int trim(struct __sk_buff *skb)
{
	const __u32 keep = MRC_OFF + MRC_HDR_LEN;
	if (bpf_skb_change_tail(skb, keep, 0))
		return -1;
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	if (data + keep > end)
		return -1;
	struct ipv6hdr *ip6 = data + L3_OFF;
	struct udphdr *udp = data + L4_OFF;
	__u8 *mrc = data + MRC_OFF;
	__u16 l4len = sizeof(struct udphdr) + MRC_HDR_LEN;
	ip6->payload_len = bpf_htons(l4len);
	udp->len = bpf_htons(l4len);
	mrc[MRC_FLAGS_OFF] |= MRC_FLAG_TRIMMED;
	udp->check = 0;
	/* Pseudo-header (addresses, length, next header) + UDP header + MRC header. */
	__be32 tail[2] = { bpf_htonl(l4len), bpf_htonl(IPPROTO_UDP) };
	__s64 sum = bpf_csum_diff(0, 0, (__be32 *)&ip6->saddr, 32, 0);
	sum = bpf_csum_diff(0, 0, tail, sizeof(tail), sum);
	sum = bpf_csum_diff(0, 0, (__be32 *)udp, sizeof(struct udphdr) + MRC_HDR_LEN, sum);
	if (sum < 0)
		return -1;
	__u16 check = csum_fold((__u64)sum);
	udp->check = check ? check : 0xffff;
	return 0;
}

SEC("tc")
int mrc_egress(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	if (data + MRC_OFF + MRC_HDR_LEN > end)
		return TC_ACT_OK;  /* too short to be an MRC packet we understand */
	struct ethhdr *eth = data;
	if (eth->h_proto != bpf_htons(ETH_P_IPV6))
		return TC_ACT_OK;
	struct ipv6hdr *ip6 = data + L3_OFF;
	if (ip6->nexthdr != IPPROTO_UDP)
		return TC_ACT_OK;
	struct udphdr *udp = data + L4_OFF;
	if (udp->dest != bpf_htons(MRC_PORT))
		return TC_ACT_OK;
	__u8 *mrc = data + MRC_OFF;
	if (mrc[MRC_MAGIC_OFF] != MRC_MAGIC)
		return TC_ACT_OK;

	__u32 ifindex = skb->ifindex;
	struct port_cfg *cfg = bpf_map_lookup_elem(&mrc_cfg, &ifindex);
	struct port_state *st = bpf_map_lookup_elem(&mrc_state, &ifindex);
	struct port_counters *ctr = bpf_map_lookup_elem(&mrc_counters, &ifindex);
	if (!cfg || !st || !ctr)
		return TC_ACT_OK;  /* port not configured: plain forwarding */

	__u8 opcode = mrc[MRC_OPCODE_OFF];
	__u8 flags = mrc[MRC_FLAGS_OFF];
	int control = opcode > MRC_DATA_OPCODE_MAX || (flags & MRC_FLAG_TRIMMED);
	__u32 len = skb->len;
	__u64 now = bpf_ktime_get_ns();
	int action = 0;  /* 0 pass, 1 mark, 2 trim, 3 drop */

	bpf_spin_lock(&st->lock);
	__u64 drained = (now - st->last_ns) * cfg->rate_bps / 8000000000ULL;
	st->vq_bytes = st->vq_bytes > drained ? st->vq_bytes - drained : 0;
	st->last_ns = now;
	__u64 vq = st->vq_bytes;
	if (!control) {
		if (vq + len > cfg->trim_bytes && (cfg->flags & FLAG_TRIM))
			action = 2;
		else if (vq + len > cfg->drop_bytes)
			action = 3;
		else if (vq > cfg->mark_bytes && !(cfg->flags & FLAG_LAST_HOP) &&
			 (ip6->flow_lbl[0] & 0x30))  /* ECN field != Not-ECT */
			action = 1;
	}
	if (action == 2)
		st->vq_bytes += MRC_OFF + MRC_HDR_LEN;
	else if (action != 3)
		st->vq_bytes += len;
	if (st->vq_bytes > ctr->vq_max)
		ctr->vq_max = st->vq_bytes;
	bpf_spin_unlock(&st->lock);

	__sync_fetch_and_add(&ctr->packets, 1);
	__sync_fetch_and_add(&ctr->bytes, len);
	if (action == 3) {
		__sync_fetch_and_add(&ctr->dropped, 1);
		return TC_ACT_SHOT;
	}
	if (action == 2) {
		if (trim(skb)) {
			__sync_fetch_and_add(&ctr->dropped, 1);
			return TC_ACT_SHOT;
		}
		__sync_fetch_and_add(&ctr->trimmed, 1);
		skb->priority = HIGH_PRIO_CLASS;
		return TC_ACT_OK;
	}
	if (action == 1) {
		/* ECN is the low two bits of the traffic class: flow_lbl[0] bits 5..4. */
		ip6->flow_lbl[0] |= 0x30;
		__sync_fetch_and_add(&ctr->marked, 1);
	}
	if (control)
		__sync_fetch_and_add(&ctr->control, 1);
	skb->priority = control ? HIGH_PRIO_CLASS : DATA_CLASS;
	return TC_ACT_OK;
}

char _license[] SEC("license") = "GPL";
