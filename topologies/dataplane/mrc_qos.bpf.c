// SPDX-License-Identifier: GPL-2.0
/* MRC switch egress: ECN marking, packet trimming and a priority class, for kernels without
 * RED/fq/netem (tc clsact egress, direct action; one loaded program shared by many ports).
 *
 * A per-port virtual queue (vq) drains at the port's configured rate, the rate HTB enforces on
 * the real queue, and counts every byte the port sends. With q = vq + this packet:
 *   q > mark_bytes: ECN-capable MRC data gets CE, except on a last-hop port (facing a host);
 *   q > trim_bytes: MRC data is cut to IPv6 + UDP + its headers + a zeroed ICRC field
 *                   (TRIM_KEEP), PadCnt cleared, flagged TRIMMED and sent in the control class
 *                   (if the port trims and the packet has payload to cut);
 *   q > drop_bytes: MRC data that was not trimmed is dropped.
 * MRC packets are RoCEv2 packets (UDP, RoCEv2's port) whose BTH opcode is in the
 * manufacturer-specific range (top three bits 111), with MRC's version in the MRCETH; another
 * vendor's RoCEv2 packet is not MRC. Control (opcode above the data range, or an already
 * trimmed header) takes the control class only if it has the size the wire format gives it and
 * fits the port's control budget (a token bucket at a share of the link, `police_control`): a
 * sender's label alone does not buy strict priority. Control that fails either is demoted:
 * queued, marked and dropped as data, never trimmed, and counted. Anything this program cannot
 * parse passes untouched: only its bytes enter the vq.
 *
 * A trimmed header is sent through the port's egress once more (bpf_redirect to its own
 * ifindex): the qdisc took the packet's length before this program ran (qdisc_pkt_len_init runs
 * before the clsact egress hook), so without it HTB would charge the header as the full frame.
 * REINJECT_MARK in skb->mark tells the second pass to let it through in the control class
 * without counting it again (the first pass admitted TRIM_LEN to the vq already).
 *
 * Two layouts are parsed: plain IPv6/UDP/MRC, and the MRC paper's IPv6-in-IPv6 (outer
 * destination = the uSID carrier, inner destination = the receiving NIC). Encapsulated, CE is
 * set on both headers (the receiver's End.DT6 decapsulation does not copy it inward), and a trim
 * fixes both payload lengths and UDP's and sums the checksum over the inner pseudo-header.
 *
 * Every MRC constant comes from endpoints/protocol/wire.py at build time (-D flags written by
 * `python -m topologies.dataplane build`), so the two can never disagree.
 */
#include <linux/bpf.h>
#include <linux/pkt_cls.h>
#include <linux/if_ether.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#if !defined(MRC_PORT) || !defined(MRC_COMMON_LEN) || !defined(MRC_DATA_HDR) || \
	!defined(MRC_TRIM_KEEP) || !defined(MRC_ICRC_LEN) || !defined(MRC_OPCODE_OFF) || \
	!defined(MRC_FLAGS_OFF) || !defined(MRC_PADCNT_OFF) || !defined(MRC_PADCNT_MASK) || \
	!defined(MRC_VERSION_OFF) || !defined(MRC_OPCODE_VENDOR_MASK) || !defined(MRC_VERSION) || \
	!defined(MRC_F_TRIMMED) || !defined(MRC_F_TRIMMED_LASTHOP) || !defined(MRC_TRIM_DSCP) || \
	!defined(MRC_DATA_OPCODE_MAX) || !defined(CLASS_CONTROL) || !defined(MRC_SACK_LEN) || \
	!defined(MRC_NACK_LEN) || !defined(MRC_PROBE_LEN) || !defined(MRC_OP_SACK) || \
	!defined(MRC_OP_NACK) || !defined(MRC_OP_PROBE) || !defined(MRC_OP_PROBE_REPLY) || \
	!defined(CLASS_DATA) || !defined(RATE_SHIFT) || !defined(FLAG_LAST_HOP) || \
	!defined(FLAG_TRIM) || !defined(REINJECT_MARK)
#error "build with `python -m topologies.dataplane build`: constants come from endpoints/protocol/wire.py"
#endif

_Static_assert(MRC_TRIM_KEEP % 4 == 0, "bpf_csum_diff sums whole 32-bit words");
_Static_assert(MRC_TRIM_KEEP == MRC_DATA_HDR + MRC_ICRC_LEN, "a trimmed packet keeps its ICRC field");
_Static_assert(MRC_COMMON_LEN <= MRC_DATA_HDR, "BTH + MRCETH are a prefix of the data headers");
_Static_assert(MRC_FLAGS_OFF < MRC_COMMON_LEN && MRC_VERSION_OFF < MRC_COMMON_LEN &&
	       MRC_PADCNT_OFF < MRC_COMMON_LEN, "classify() reads only BTH + MRCETH");

#define L3_OFF ETH_HLEN
/* encap = 0: Ethernet | IPv6 | UDP | MRC;  encap = 1: Ethernet | IPv6 | IPv6 | UDP | MRC.
 * Extension headers are not parsed. Every function taking `encap` is always_inline and called
 * with a constant, so the verifier sees constant offsets. */
#define IP_OFF(encap) (L3_OFF + 40 * (encap))     /* the header holding the UDP addresses */
#define L4_OFF(encap) (L3_OFF + 40 + 40 * (encap))
#define PAYLOAD_OFF(encap) (L4_OFF(encap) + 8)   /* the MRC header */
#define TRIM_LEN(encap) (PAYLOAD_OFF(encap) + MRC_TRIM_KEEP)  /* what a trimmed frame keeps */
#define KEPT_AFTER_L3(encap) (TRIM_LEN(encap) - L3_OFF - 40)  /* kept after the outer IPv6 header */
#define ADJ_ROOM_MAX 0xfff                 /* bpf_skb_adjust_room's largest step */
#define ADJ_ROOM_CALLS 4                   /* frames up to ~16 KB: above any MTU here */
#define IPPROTO_IPV6_ENCAP 41
#define VQ_CAP_BYTES (1ULL << 30)          /* keeps vq << RATE_SHIFT far from u64 overflow */
#define ECN_MASK 0x30                      /* ECN = low 2 bits of traffic class = byte 1 bits 5:4 */
#define ECN_CE 0x30

enum kind { OTHER, CONTROL, DATA, DEMOTED };  /* DEMOTED: labelled control, handled as data */
enum action { PASS, MARK, TRIM, DROP };

struct port_cfg {
	__u64 rate_fp;     /* drain rate, bytes per ns << RATE_SHIFT (Python computes it) */
	__u32 mark_bytes;
	__u32 trim_bytes;
	__u32 drop_bytes;
	__u32 flags;       /* FLAG_LAST_HOP | FLAG_TRIM */
	__u64 ctl_rate_fp; /* control budget refill, bytes per ns << RATE_SHIFT (a share of rate_fp) */
	__u32 ctl_burst_bytes;  /* control budget cap */
	__u32 pad;
};

struct port_state {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 vq_fp;       /* backlog, bytes << RATE_SHIFT: keeps sub-byte drain between packets */
	__u64 last_ns;     /* last drain; a value in the future freezes the queue (tests use it) */
	__u64 ctl_tokens_fp;  /* control budget left, bytes << RATE_SHIFT */
	__u64 ctl_last_ns;    /* last refill; in the future: frozen (tests) */
};

struct port_counters {  /* packets/bytes count MRC only (bytes as they arrived, before a trim) */
	__u64 packets;
	__u64 bytes;
	__u64 marked;
	__u64 trimmed;
	__u64 dropped;
	__u64 control;
	__u64 vq_max;      /* bytes */
	__u64 other_packets;
	__u64 other_bytes;
	__u64 demoted;     /* labelled control, sent as data: wrong size, or over the budget */
};

/* Keyed by ifindex: one loaded program (and these maps) per network namespace. Not pinned by
 * name: the loader pins them under its own directory, so two loads never share state. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct port_cfg);
} mrc_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct port_state);
} mrc_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct port_counters);
} mrc_counters SEC(".maps");

static __always_inline __u16 csum_fold(__u64 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)~sum;
}

/* The UDP payload size the wire format gives a control datagram: a trimmed header (any data
 * opcode) keeps exactly its headers and the ICRC field (TRIM_KEEP); SACK, NACK and probes have
 * fixed sizes. Any other opcode above the data range is no control the wire format knows. */
static __always_inline int control_shape_ok(__u8 opcode, __u32 mrc_len)
{
	if (opcode <= MRC_DATA_OPCODE_MAX)
		return mrc_len == MRC_TRIM_KEEP;
	switch (opcode) {
	case MRC_OP_SACK:
		return mrc_len == MRC_SACK_LEN;
	case MRC_OP_NACK:
		return mrc_len == MRC_NACK_LEN;
	case MRC_OP_PROBE:
	case MRC_OP_PROBE_REPLY:
		return mrc_len == MRC_PROBE_LEN;
	}
	return 0;
}

/* What the packet is. Reads only what is linear after a bounded pull; anything inconsistent is
 * OTHER. Sets *trimmable (data with payload to cut) and *ect (ECT(0) or ECT(1), not CE).
 * `encap`: the layout to parse (see IP_OFF); the outer header's consistency is checked too. */
static __always_inline enum kind classify(struct __sk_buff *skb, int encap, int *trimmable, int *ect)
{
	__u32 len = skb->len;
	if (len < PAYLOAD_OFF(encap) + MRC_COMMON_LEN || skb->gso_segs > 1)
		return OTHER;  /* a GSO super-packet is not one MRC datagram: never cut it */
	__u32 want = len < TRIM_LEN(encap) ? len : TRIM_LEN(encap);
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	if (data + want > end) {  /* headers in paged data (e.g. large frames from AF_PACKET) */
		if (bpf_skb_pull_data(skb, want))
			return OTHER;
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
	}
	if (data + PAYLOAD_OFF(encap) + MRC_COMMON_LEN > end)
		return OTHER;
	struct ethhdr *eth = data;
	__u8 *outer = data + L3_OFF;
	__u8 *ip6 = data + IP_OFF(encap);
	struct udphdr *udp = data + L4_OFF(encap);
	__u8 *mrc = data + PAYLOAD_OFF(encap);
	if (eth->h_proto != bpf_htons(ETH_P_IPV6) || (ip6[0] >> 4) != 6 || ip6[6] != IPPROTO_UDP)
		return OTHER;
	if (encap) {
		__u16 outer_plen = ((__u16)outer[4] << 8) | outer[5];
		if ((outer[0] >> 4) != 6 || outer[6] != IPPROTO_IPV6_ENCAP || L3_OFF + 40 + outer_plen != len)
			return OTHER;
	}
	if (udp->dest != bpf_htons(MRC_PORT) ||
	    (mrc[MRC_OPCODE_OFF] & MRC_OPCODE_VENDOR_MASK) != MRC_OPCODE_VENDOR_MASK ||
	    mrc[MRC_VERSION_OFF] != MRC_VERSION)
		return OTHER;  /* not MRC_PORT, another vendor's RoCEv2 opcode, or not MRC's version */
	__u16 udp_len = bpf_ntohs(udp->len);
	__u16 ip_plen = ((__u16)ip6[4] << 8) | ip6[5];
	if (udp_len != ip_plen || udp_len < 8 + MRC_COMMON_LEN || L4_OFF(encap) + udp_len > len)
		return OTHER;
	/* ECN and the class: the outer header's (the one switches queue by); an encapsulating
	 * sender copies the inner traffic class outward. */
	__u8 ecn = outer[1] & ECN_MASK;
	*ect = ecn != 0 && ecn != ECN_CE;
	if (mrc[MRC_OPCODE_OFF] > MRC_DATA_OPCODE_MAX || (mrc[MRC_FLAGS_OFF] & MRC_F_TRIMMED))
		return control_shape_ok(mrc[MRC_OPCODE_OFF], udp_len - 8) ? CONTROL : DEMOTED;
	/* Trimming is a per-class switch feature: only the MRC data class (its DSCP) is cut; the
	 * RoCE baseline's class sees plain drop-tail, as RoCE without PFC would. */
	*trimmable = udp_len > 8 + MRC_TRIM_KEEP &&
		(((outer[0] & 0x0f) << 2) | (outer[1] >> 6)) == MRC_TRIM_DSCP;
	return DATA;
}

/* Advance the vq to `now` at the port rate. Overflow-free: the product is only formed when it
 * is below vq_fp (< 2^63 thanks to VQ_CAP_BYTES). */
static __always_inline void drain(struct port_state *st, const struct port_cfg *cfg, __u64 now)
{
	if (now <= st->last_ns)
		return;
	__u64 elapsed = now - st->last_ns;
	st->last_ns = now;
	if (!cfg->rate_fp)
		return;
	if (elapsed >= st->vq_fp / cfg->rate_fp)
		st->vq_fp = 0;
	else
		st->vq_fp -= elapsed * cfg->rate_fp;
}

/* The control class's budget: a token bucket per port, refilled at ctl_rate_fp up to
 * ctl_burst_bytes. True (tokens taken) if a control packet of `len` bytes fits; false, and it is
 * demoted to the data class, when a host sends more control than genuine SACKs, NACKs, probes
 * and trimmed headers need. Called under the port's lock. Overflow-free as drain(). */
static __always_inline int police_control(struct port_state *st, const struct port_cfg *cfg,
					  __u64 now, __u32 len)
{
	__u64 cap = (__u64)cfg->ctl_burst_bytes << RATE_SHIFT;
	if (st->ctl_tokens_fp > cap)
		st->ctl_tokens_fp = cap;
	if (now > st->ctl_last_ns) {
		__u64 elapsed = now - st->ctl_last_ns;
		st->ctl_last_ns = now;
		if (cfg->ctl_rate_fp && elapsed >= (cap - st->ctl_tokens_fp) / cfg->ctl_rate_fp)
			st->ctl_tokens_fp = cap;
		else
			st->ctl_tokens_fp += elapsed * cfg->ctl_rate_fp;
	}
	__u64 need = (__u64)len << RATE_SHIFT;
	if (st->ctl_tokens_fp < need)
		return 0;
	st->ctl_tokens_fp -= need;
	return 1;
}

/* Cut the frame to TRIM_LEN. bpf_skb_change_tail refuses an skb the kernel flagged as
 * encapsulated (skb->encapsulation), and on kernel routers every MRC data packet is: the sending
 * host's lwt program set the flag (bpf_lwt_push_encap) and each veth hands the same skb on to
 * the next namespace, so nothing clears it before the receiver's End.DT6 (OVS userspace sends a
 * fresh skb from every port). Without this fallback a kernel router never trims: every packet
 * past the trim threshold was dropped instead. bpf_skb_adjust_room shrinks right after the L3
 * header whatever the flag, at most ADJ_ROOM_MAX bytes per call. */
static __always_inline int cut_tail(struct __sk_buff *skb, int encap)
{
	if (!bpf_skb_change_tail(skb, TRIM_LEN(encap), 0))
		return 0;
	/* Refused (the kernel's ENOTSUPP for an skb flagged encapsulated): move the bytes kept
	 * after the outer IPv6 header to the frame's end, then remove everything between. */
	__u8 kept[KEPT_AFTER_L3(1)];
	__u32 len = skb->len;
	if (len <= TRIM_LEN(encap) ||
	    bpf_skb_load_bytes(skb, L3_OFF + 40, kept, KEPT_AFTER_L3(encap)) ||
	    bpf_skb_store_bytes(skb, len - KEPT_AFTER_L3(encap), kept, KEPT_AFTER_L3(encap), 0))
		return -1;
	__u32 excess = len - TRIM_LEN(encap);
#pragma unroll
	for (int i = 0; i < ADJ_ROOM_CALLS; i++) {
		__u32 n = excess > ADJ_ROOM_MAX ? ADJ_ROOM_MAX : excess;
		if (n && bpf_skb_adjust_room(skb, -(__s32)n, BPF_ADJ_ROOM_NET, 0))
			return -1;
		excess -= n;
	}
	/* The kernel removed the bytes right after its idea of the L3 header: check it is ours. */
	__u64 now_there, moved;
	__builtin_memcpy(&moved, kept, sizeof(moved));
	if (excess || skb->len != TRIM_LEN(encap) ||
	    bpf_skb_load_bytes(skb, L3_OFF + 40, &now_there, sizeof(now_there)) || now_there != moved)
		return -1;
	return 0;
}

/* Cut a data packet to TRIM_LEN, zero its ICRC field (no CRC here: the agents do not check it,
 * and the UDP checksum below covers the packet), clear PadCnt (no payload is left), flag it
 * TRIMMED, fix the lengths (both IPv6 payload lengths
 * when encapsulated, and UDP's) and recompute the UDP checksum over what is left, with the
 * pseudo-header of the IPv6 header that carries the UDP datagram (the inner one when
 * encapsulated). The receiving kernel verifies it; OVS userspace does not fix it. Senders
 * here write full checksums, so the field is never a CHECKSUM_PARTIAL seed. */
static __always_inline int trim(struct __sk_buff *skb, int encap, int last_hop)
{
	if (cut_tail(skb, encap))
		return -1;
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	if (data + TRIM_LEN(encap) > end) {
		if (bpf_skb_pull_data(skb, TRIM_LEN(encap)))
			return -1;
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
		if (data + TRIM_LEN(encap) > end)
			return -1;
	}
	struct ipv6hdr *outer = data + L3_OFF;
	struct ipv6hdr *ip6 = data + IP_OFF(encap);
	struct udphdr *udp = data + L4_OFF(encap);
	__u8 *mrc = data + PAYLOAD_OFF(encap);
	const __u16 l4len = 8 + MRC_TRIM_KEEP;
	/* The ICRC field: the last bytes kept (they were payload). Its offset is not 4-aligned in
	 * the frame, so a byte-wise store, not a __u32 one. */
	__builtin_memset(data + TRIM_LEN(encap) - MRC_ICRC_LEN, 0, MRC_ICRC_LEN);
	mrc[MRC_PADCNT_OFF] &= (__u8)~MRC_PADCNT_MASK;
	ip6->payload_len = bpf_htons(l4len);
	if (encap)
		outer->payload_len = bpf_htons(40 + l4len);
	udp->len = bpf_htons(l4len);
	udp->check = 0;
	/* A trim on the port facing the receiver is the receiver's own incast, not the path's
	 * fault: the flag lets it send TRIMMED_LASTHOP, which does not penalise the EV. */
	mrc[MRC_FLAGS_OFF] |= MRC_F_TRIMMED | (last_hop ? MRC_F_TRIMMED_LASTHOP : 0);
	/* RFC 8200 pseudo-header (addresses, upper-layer length, next header), then UDP + MRC. */
	__be32 pseudo[2] = { bpf_htonl(l4len), bpf_htonl(IPPROTO_UDP) };
	__s64 sum = bpf_csum_diff(0, 0, (__be32 *)&ip6->saddr, 32, 0);
	if (sum < 0)
		return -1;
	sum = bpf_csum_diff(0, 0, pseudo, sizeof(pseudo), (__wsum)sum);
	if (sum < 0)
		return -1;
	sum = bpf_csum_diff(0, 0, (__be32 *)udp, l4len, (__wsum)sum);
	if (sum < 0)
		return -1;
	__u16 check = csum_fold((__u64)sum);
	udp->check = check ? check : 0xffff;  /* 0 means "no checksum", forbidden for IPv6 UDP */
	return 0;
}

/* CE on the outer header and, when encapsulated, on the inner one too. IPv6 has no header
 * checksum and UDP's does not cover the traffic class. */
static __always_inline int mark_ce(struct __sk_buff *skb, int encap)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	__u8 *tc = data + L3_OFF + 1;
	__u8 *inner_tc = data + IP_OFF(encap) + 1;
	if ((void *)(inner_tc + 1) > end || (void *)(tc + 1) > end)
		return 0;
	*tc |= ECN_CE;
	if (encap && (*inner_tc & ECN_MASK))  /* only an ECN-capable inner packet may carry CE */
		*inner_tc |= ECN_CE;
	return 1;
}

static __always_inline int egress(struct __sk_buff *skb, int encap)
{
	__u32 ifindex = skb->ifindex;
	struct port_cfg *cfg = bpf_map_lookup_elem(&mrc_cfg, &ifindex);
	if (!cfg)
		return TC_ACT_OK;  /* port not configured: plain forwarding */
	struct port_state *st = bpf_map_lookup_elem(&mrc_state, &ifindex);
	struct port_counters *ctr = bpf_map_lookup_elem(&mrc_counters, &ifindex);
	if (!st || !ctr)
		return TC_ACT_OK;

	int trimmable = 0, ect = 0;
	__u32 len = skb->len;
	enum kind kind = classify(skb, encap, &trimmable, &ect);
	__u64 mark_fp = (__u64)cfg->mark_bytes << RATE_SHIFT;
	__u64 trim_fp = (__u64)cfg->trim_bytes << RATE_SHIFT;
	__u64 drop_fp = (__u64)cfg->drop_bytes << RATE_SHIFT;
	__u32 flags = cfg->flags;
	__u64 now = bpf_ktime_get_ns();
	enum action action = PASS;

	bpf_spin_lock(&st->lock);
	drain(st, cfg, now);
	if (kind == CONTROL && !police_control(st, cfg, now, len))
		kind = DEMOTED;
	__u64 q = st->vq_fp + ((__u64)len << RATE_SHIFT);
	__u64 admitted = len;
	if (kind == OTHER) {
		if (q > drop_fp)
			admitted = 0;  /* the real FIFO will tail-drop it */
	} else if (kind == DATA || kind == DEMOTED) {  /* only DATA can be trimmable */
		if (q > trim_fp && (flags & FLAG_TRIM) && trimmable) {
			action = TRIM;
			admitted = TRIM_LEN(encap);
		} else if (q > drop_fp) {
			action = DROP;
			admitted = 0;
		} else if (q > mark_fp && ect && !(flags & FLAG_LAST_HOP)) {
			action = MARK;
		}
	}
	st->vq_fp += admitted << RATE_SHIFT;
	if (st->vq_fp > (VQ_CAP_BYTES << RATE_SHIFT))
		st->vq_fp = VQ_CAP_BYTES << RATE_SHIFT;
	__u64 vq_bytes = st->vq_fp >> RATE_SHIFT;
	if (vq_bytes > ctr->vq_max)
		ctr->vq_max = vq_bytes;
	bpf_spin_unlock(&st->lock);

	if (kind == OTHER) {
		__sync_fetch_and_add(&ctr->other_packets, 1);
		__sync_fetch_and_add(&ctr->other_bytes, len);
		return TC_ACT_OK;
	}
	__sync_fetch_and_add(&ctr->packets, 1);
	__sync_fetch_and_add(&ctr->bytes, len);
	if (kind == DEMOTED)
		__sync_fetch_and_add(&ctr->demoted, 1);
	if (kind == CONTROL) {
		__sync_fetch_and_add(&ctr->control, 1);
		skb->priority = CLASS_CONTROL;
		return TC_ACT_OK;
	}
	if (action == DROP) {
		__sync_fetch_and_add(&ctr->dropped, 1);
		return TC_ACT_SHOT;
	}
	if (action == TRIM) {
		if (trim(skb, encap, flags & FLAG_LAST_HOP)) {  /* cannot be trimmed after all: this is the only other drop */
			__sync_fetch_and_add(&ctr->dropped, 1);
			return TC_ACT_SHOT;
		}
		__sync_fetch_and_add(&ctr->trimmed, 1);
		skb->priority = CLASS_CONTROL;
		/* The qdisc sized this packet before we cut it and would charge the header as the
		 * full frame: enqueue it on this port again, sized, shaped and counted as what it is. */
		skb->mark = REINJECT_MARK;
		return bpf_redirect(ifindex, 0);
	}
	if (action == MARK && mark_ce(skb, encap))  /* classify() made these bytes linear */
		__sync_fetch_and_add(&ctr->marked, 1);
	skb->priority = CLASS_DATA;
	return TC_ACT_OK;
}

SEC("tc")
int mrc_egress(struct __sk_buff *skb)
{
	if (skb->mark == REINJECT_MARK) {  /* our trimmed header on its second pass: counted once */
		skb->mark = 0;
		skb->priority = CLASS_CONTROL;
		return TC_ACT_OK;
	}
	/* Outer next header: IPv6-in-IPv6 or not. Frames from AF_PACKET (OVS userspace) may have
	 * only the Ethernet header linear: pull the IPv6 header's first bytes first. */
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	if (data + L3_OFF + 7 > end) {
		if (skb->len < L3_OFF + 7 || bpf_skb_pull_data(skb, L3_OFF + 7))
			return egress(skb, 0);
		data = (void *)(long)skb->data;
		end = (void *)(long)skb->data_end;
	}
	__u8 *nh = data + L3_OFF + 6;
	if ((void *)(nh + 1) <= end && *nh == IPPROTO_IPV6_ENCAP)
		return egress(skb, 1);
	return egress(skb, 0);
}

char _license[] SEC("license") = "GPL";
