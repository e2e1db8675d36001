/*
 * The floor of a small-message round trip on this machine: two processes
 * exchanging UDP datagrams over loopback, each busy-polling a
 * non-blocking socket with recvfrom and answering with one sendto, as the
 * software device's busy-polled ping-pong does at its best. scripts/speed.sh
 * holds rdmago's 8-byte half round trip to it.
 *
 * With "ack", each message goes as the device sends an RC answer together
 * with the ACK it held for the message answered: one GSO send of two
 * datagrams, the message and 20 bytes (BTH, AETH and ICRC), to sockets
 * that take them whole (UDP_GRO). That is the floor of the packets the
 * device's ping-pong moves, for SIZE the RoCE packet's length (24 for an
 * 8-byte SEND: BTH, payload, ICRC).
 *
 *   udp_floor server PORT [ack]          echoes until killed
 *   udp_floor client PORT SIZE N [ack]   prints the mean half round trip, in us
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

/* ACK is the length of an RC ACK packet: BTH, AETH, ICRC. */
#define ACK 20

/* send sends the size bytes of buf to *to: alone, or with ack the ACK's
 * ACK bytes that follow them as a second datagram of one GSO send. */
static void send1(int fd, char *buf, int size, int ack, struct sockaddr_in *to)
{
	char cbuf[CMSG_SPACE(sizeof(unsigned short))];
	struct iovec iov = {.iov_base = buf, .iov_len = size + ACK};
	struct msghdr m = {.msg_name = to, .msg_namelen = sizeof *to, .msg_iov = &iov, .msg_iovlen = 1,
			   .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	struct cmsghdr *c;

	if (!ack) {
		sendto(fd, buf, size, 0, (struct sockaddr *)to, sizeof *to);
		return;
	}
	memset(cbuf, 0, sizeof cbuf);
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = IPPROTO_UDP;
	c->cmsg_type = UDP_SEGMENT;
	c->cmsg_len = CMSG_LEN(sizeof(unsigned short));
	*(unsigned short *)CMSG_DATA(c) = size;
	sendmsg(fd, &m, 0);
}

static int sock(int port, int bind_it, int ack)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
		perror("socket");
		exit(1);
	}
	if (ack && setsockopt(fd, IPPROTO_UDP, UDP_GRO, &(int){1}, sizeof(int)) < 0) {
		perror("UDP_GRO");
		exit(1);
	}
	if (bind_it && bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		perror("bind");
		exit(1);
	}
	return fd;
}

int main(int argc, char **argv)
{
	char buf[65536];
	struct sockaddr_in peer;
	socklen_t len;
	ssize_t n;

	if ((argc == 3 || (argc == 4 && strcmp(argv[3], "ack") == 0)) && strcmp(argv[1], "server") == 0) {
		int ack = argc == 4, fd = sock(atoi(argv[2]), 1, ack);

		for (;;) {
			len = sizeof peer;
			n = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&peer, &len);
			/* With ack, a message comes with its ACK (n > ACK); an ACK
			 * the kernel did not join to its message is left alone. */
			if (n > (ack ? ACK : -1))
				send1(fd, buf, ack ? n - ACK : n, ack, &peer);
		}
	}
	if ((argc == 5 || (argc == 6 && strcmp(argv[5], "ack") == 0)) && strcmp(argv[1], "client") == 0) {
		int ack = argc == 6, fd = sock(0, 0, ack), size = atoi(argv[3]), iters = atoi(argv[4]), i;
		struct sockaddr_in srv = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
		struct timespec t0, t1;

		srv.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (size < 1 || size > (int)sizeof buf - ACK || iters < 1 || (ack && size <= ACK)) {
			fprintf(stderr, "bad size or count\n");
			return 2;
		}
		memset(buf, 'x', size);
		for (i = -iters / 10; i < iters; i++) { /* the first tenth warms up */
			if (i == 0)
				clock_gettime(CLOCK_MONOTONIC, &t0);
			send1(fd, buf, size, ack, &srv);
			do
				n = recv(fd, buf, sizeof buf, 0);
			while ((n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) || (ack && n >= 0 && n <= ACK));
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		printf("%.3f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / iters / 2);
		return 0;
	}
	fprintf(stderr, "usage: udp_floor server PORT [ack] | udp_floor client PORT SIZE N [ack]\n");
	return 2;
}
