// mrcblast: a fast MRC-shaped load generator and sink for the data-plane benchmark
// (experiments/tools/dataplane_bench.py; built by `make setup` into build/mrcblast). Python
// cannot offer hundreds of thousands of 4 KB frames per second; this sends prebuilt ones.
//
//   mrcblast send IFNAME FRAMES_FILE SECONDS [PPS]   (run inside the sender's namespace)
//     FRAMES_FILE: concatenated records <u16 little-endian length><Ethernet frame>, built in
//     Python with the project's wire format (checksums already valid). Frames are sent in
//     turn (so every EV/path of the file is used) with sendmmsg on an AF_PACKET socket bound
//     to IFNAME: no per-packet checksum or header work, the host qdisc (HTB) still applies.
//     PPS 0 or absent: as fast as possible; otherwise paced, asleep until each frame is due.
//   mrcblast recv PORT SECONDS [FULL_LEN]            (run inside the receiver's namespace)
//     A UDP/IPv6 socket on PORT drained with recvmmsg (the kernel verifies checksums).
//     Datagrams of at least FULL_LEN bytes count as full data, shorter ones as headers.
//
// Both print one JSON line: counts, elapsed seconds and their own CPU time (getrusage).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define MAXF 9216

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) { (void)sig; stop_flag = 1; }

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void cpu(double *user, double *sys)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	*user = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
	*sys = ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static int do_send(const char *ifname, const char *path, double seconds, double pps)
{
	FILE *fh = fopen(path, "rb");
	if (!fh) { perror(path); return 2; }
	struct stat st;
	fstat(fileno(fh), &st);
	unsigned char *buf = malloc(st.st_size);
	if (fread(buf, 1, st.st_size, fh) != (size_t)st.st_size) { perror("read"); return 2; }
	fclose(fh);
	int nframes = 0;
	struct iovec *frames = NULL;
	for (off_t off = 0; off + 2 <= st.st_size;) {
		uint16_t len = buf[off] | (buf[off + 1] << 8);
		frames = realloc(frames, (nframes + 1) * sizeof(*frames));
		frames[nframes].iov_base = buf + off + 2;
		frames[nframes].iov_len = len;
		nframes++;
		off += 2 + len;
	}
	if (!nframes) { fprintf(stderr, "no frames\n"); return 2; }
	int fd = socket(AF_PACKET, SOCK_RAW, 0);  /* protocol 0: send only, never receive */
	if (fd < 0) { perror("socket"); return 2; }
	int sndbuf = 4 << 20;
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_ifindex = if_nametoindex(ifname) };
	if (!sll.sll_ifindex) { perror(ifname); return 2; }
	if (bind(fd, (struct sockaddr *)&sll, sizeof(sll))) { perror("bind"); return 2; }
	struct mmsghdr msgs[BATCH];
	memset(msgs, 0, sizeof(msgs));
	unsigned long long sent = 0, bytes = 0, errors = 0;
	int next = 0;
	double t0 = now_s(), end = t0 + seconds, u0, s0;
	cpu(&u0, &s0);
	double attempted = 0;
	while (!stop_flag) {
		double t = now_s();
		if (t >= end)
			break;
		int want = BATCH;
		if (pps > 0) {  /* token pacing on attempts (a failed send still used its slot) */
			double allowed = pps * (t - t0) - attempted;
			if (allowed < 1) {  /* sleep until the next frame is due, 50 us at least */
				double wait = (1 - allowed) / pps;
				long wait_ns = wait > 50e-6 ? (long)(wait * 1e9) : 50000;
				struct timespec ns = { wait_ns / 1000000000L, wait_ns % 1000000000L };
				nanosleep(&ns, NULL);
				continue;
			}
			if (allowed < want)
				want = (int)allowed;
		}
		attempted += want;
		for (int i = 0; i < want; i++) {
			msgs[i].msg_hdr.msg_iov = &frames[next];
			msgs[i].msg_hdr.msg_iovlen = 1;
			next = (next + 1) % nframes;
		}
		int n = sendmmsg(fd, msgs, want, 0);
		if (n < 0) {
			errors++;
			if (errno == ENOBUFS || errno == EAGAIN) {  /* host queue full: back off a little */
				struct timespec ns = { 0, 20000 };
				nanosleep(&ns, NULL);
			}
			/* the frames of this batch that were not sent are skipped */
			continue;
		}
		for (int i = 0; i < n; i++)
			bytes += msgs[i].msg_len;
		sent += n;
		if (n < want)
			errors++;
	}
	double t1 = now_s(), u1, s1;
	cpu(&u1, &s1);
	printf("{\"mode\": \"send\", \"sent\": %llu, \"bytes\": %llu, \"errors\": %llu, "
	       "\"seconds\": %.4f, \"pps\": %.1f, \"user_s\": %.3f, \"sys_s\": %.3f, \"frames\": %d}\n",
	       sent, bytes, errors, t1 - t0, sent / (t1 - t0), u1 - u0, s1 - s0, nframes);
	return 0;
}

static int do_recv(int port, double seconds, int full_len)
{
	int fd = socket(AF_INET6, SOCK_DGRAM, 0);
	if (fd < 0) { perror("socket"); return 2; }
	int rcvbuf = 16 << 20;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in6 sa = { .sin6_family = AF_INET6, .sin6_port = htons(port), .sin6_addr = in6addr_any };
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa))) { perror("bind"); return 2; }
	struct timeval tv = { 0, 100000 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));  /* count CE */
	static unsigned char bufs[BATCH][MAXF];
	static char ctrl[BATCH][64];
	struct iovec iov[BATCH];
	struct mmsghdr msgs[BATCH];
	memset(msgs, 0, sizeof(msgs));
	for (int i = 0; i < BATCH; i++) {
		iov[i].iov_base = bufs[i];
		iov[i].iov_len = MAXF;
		msgs[i].msg_hdr.msg_iov = &iov[i];
		msgs[i].msg_hdr.msg_iovlen = 1;
	}
	unsigned long long pkts = 0, bytes = 0, full = 0, full_bytes = 0, short_pkts = 0, ce = 0;
	double first = 0, last = 0, u0, s0;
	double t0 = now_s(), end = t0 + seconds;
	cpu(&u0, &s0);
	printf("{\"mode\": \"ready\"}\n");
	fflush(stdout);
	while (!stop_flag && now_s() < end) {
		for (int i = 0; i < BATCH; i++) {
			msgs[i].msg_hdr.msg_control = ctrl[i];
			msgs[i].msg_hdr.msg_controllen = sizeof(ctrl[i]);
		}
		int n = recvmmsg(fd, msgs, BATCH, 0, NULL);
		if (n <= 0)
			continue;
		double t = now_s();
		if (!pkts)
			first = t;
		last = t;
		for (int i = 0; i < n; i++) {
			unsigned len = msgs[i].msg_len;
			for (struct cmsghdr *c = CMSG_FIRSTHDR(&msgs[i].msg_hdr); c; c = CMSG_NXTHDR(&msgs[i].msg_hdr, c))
				if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS &&
				    (*(int *)CMSG_DATA(c) & 3) == 3)
					ce++;
			bytes += len;
			if ((int)len >= full_len) {
				full++;
				full_bytes += len;
			} else {
				short_pkts++;
			}
		}
		pkts += n;
	}
	double t1 = now_s(), u1, s1;
	cpu(&u1, &s1);
	printf("{\"mode\": \"recv\", \"packets\": %llu, \"bytes\": %llu, \"full\": %llu, "
	       "\"full_bytes\": %llu, \"short\": %llu, \"ce\": %llu, \"first\": %.6f, \"last\": %.6f, "
	       "\"seconds\": %.4f, \"user_s\": %.3f, \"sys_s\": %.3f}\n",
	       pkts, bytes, full, full_bytes, short_pkts, ce, first, last, t1 - t0, u1 - u0, s1 - s0);
	return 0;
}

int main(int argc, char **argv)
{
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	if (argc >= 5 && !strcmp(argv[1], "send"))
		return do_send(argv[2], argv[3], atof(argv[4]), argc > 5 ? atof(argv[5]) : 0);
	if (argc >= 4 && !strcmp(argv[1], "recv"))
		return do_recv(atoi(argv[2]), atof(argv[3]), argc > 4 ? atoi(argv[4]) : 1000);
	fprintf(stderr, "usage: mrcblast send IFNAME FRAMES SECONDS [PPS] | recv PORT SECONDS [FULL_LEN]\n");
	return 2;
}
