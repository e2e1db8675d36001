/*
 * The floor of a small-message round trip on this machine: two processes
 * exchanging UDP datagrams over loopback, each busy-polling a
 * non-blocking socket with recvfrom and answering with one sendto, as the
 * software device's busy-polled ping-pong does at its best. scripts/speed.sh
 * holds rdmago's 8-byte half round trip to it.
 *
 *   udp_floor server PORT            echoes until killed
 *   udp_floor client PORT SIZE N     prints the mean half round trip, in us
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

static int sock(int port, int bind_it)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
	int fd = socket(AF_INET, SOCK_DGRAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
		perror("socket");
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

	if (argc == 3 && strcmp(argv[1], "server") == 0) {
		int fd = sock(atoi(argv[2]), 1);
		for (;;) {
			len = sizeof peer;
			n = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&peer, &len);
			if (n >= 0)
				sendto(fd, buf, n, 0, (struct sockaddr *)&peer, len);
		}
	}
	if (argc == 5 && strcmp(argv[1], "client") == 0) {
		int fd = sock(0, 0), size = atoi(argv[3]), iters = atoi(argv[4]), i;
		struct sockaddr_in srv = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
		struct timespec t0, t1;

		srv.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		if (size < 1 || size > (int)sizeof buf || iters < 1) {
			fprintf(stderr, "bad size or count\n");
			return 2;
		}
		memset(buf, 'x', size);
		for (i = -iters / 10; i < iters; i++) { /* the first tenth warms up */
			if (i == 0)
				clock_gettime(CLOCK_MONOTONIC, &t0);
			sendto(fd, buf, size, 0, (struct sockaddr *)&srv, sizeof srv);
			do
				n = recv(fd, buf, sizeof buf, 0);
			while (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		printf("%.3f\n", ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / iters / 2);
		return 0;
	}
	fprintf(stderr, "usage: udp_floor server PORT | udp_floor client PORT SIZE N\n");
	return 2;
}
