/*
 * A libfabric program on C's sockets provider that offers a registered
 * region to atomics and RMA from a peer: the C side of
 * TestAtomicsAgainstCsSocketsProvider. It prints its RDM endpoint's name
 * (hex) and the region's key, serves until its standard input closes,
 * then prints the region's first eight 64-bit words.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#define CHECK(call)                                                      \
	do {                                                             \
		int rc_ = (call);                                        \
		if (rc_) {                                               \
			fprintf(stderr, "%s: %s\n", #call, fi_strerror(-rc_)); \
			return 2;                                        \
		}                                                        \
	} while (0)

static uint64_t region[64];

int main(void)
{
	struct fi_info *hints = fi_allocinfo(), *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *ep;
	struct fid_mr *mr;
	struct fi_av_attr av_attr = {.type = FI_AV_MAP};
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT};
	unsigned char name[64];
	size_t len = sizeof name, i;
	char c;

	hints->ep_attr->type = FI_EP_RDM;
	hints->caps = FI_MSG | FI_RMA | FI_ATOMIC;
	hints->fabric_attr->prov_name = strdup("sockets");
	hints->domain_attr->mr_mode = 0; /* keys chosen here, addresses as offsets */
	CHECK(fi_getinfo(FI_VERSION(1, 17), "127.0.0.1", "0", FI_SOURCE, hints, &info));
	CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
	CHECK(fi_domain(fabric, info, &domain, NULL));
	CHECK(fi_av_open(domain, &av_attr, &av, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_endpoint(domain, info, &ep, NULL));
	CHECK(fi_ep_bind(ep, &av->fid, 0));
	CHECK(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV));
	CHECK(fi_enable(ep));
	for (i = 0; i < 64; i++)
		region[i] = i * 10;
	CHECK(fi_mr_reg(domain, region, sizeof region, FI_REMOTE_READ | FI_REMOTE_WRITE, 0, 0xC0DE, 0, &mr, NULL));
	CHECK(fi_getname(&ep->fid, name, &len));
	for (i = 0; i < len; i++)
		printf("%02x", name[i]);
	printf(" %llu\n", (unsigned long long)fi_mr_key(mr));
	fflush(stdout);
	while (read(0, &c, 1) > 0)
		; /* the provider's progress thread serves the peer */
	for (i = 0; i < 8; i++)
		printf("%llu\n", (unsigned long long)region[i]);
	fi_close(&ep->fid);
	fi_close(&mr->fid);
	fi_close(&cq->fid);
	fi_close(&av->fid);
	fi_close(&domain->fid);
	fi_close(&fabric->fid);
	fi_freeinfo(info);
	fi_freeinfo(hints);
	return 0;
}
