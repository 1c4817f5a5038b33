/*
 * <rdma/ib_sa.h> - the Linux kernel's SA client API for path records
 * (include/rdma/ib_sa.h, signatures of Linux 6.17: u32 port_num, unsigned
 * long timeout_ms, the callback's num_prs) for userspace, from libib_cm.
 *
 * Hand-written, not generated: `make header-check` compiles it as C and C++
 * and checks that it declares only functions libib_cm exports.
 * struct sa_path_rec, struct ib_device and union ib_gid come from
 * <rdma/ib_cm.h>. Only what libib_cm implements is declared: SA clients,
 * asynchronous PathRecord queries and their cancellation (see
 * ib_sa_path_rec_get(3), ib_sa_register_client(3)).
 */

#ifndef IB_SA_H
#define IB_SA_H

#include <stdint.h>
#include <rdma/ib_cm.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * gfp_t: the kernel's memory allocation flags. Accepted and ignored: the
 * library allocates from the heap and never sleeps for memory. The values
 * are Linux 6.x's. Define IBCM_NO_GFP_T before including this header if
 * your code has its own gfp_t.
 */
#ifndef IBCM_NO_GFP_T
typedef unsigned int gfp_t;
#endif
#ifndef GFP_KERNEL
#define GFP_KERNEL 0x0cc0u
#endif
#ifndef GFP_NOIO
#define GFP_NOIO 0x0c00u
#endif
#ifndef GFP_ATOMIC
#define GFP_ATOMIC 0x0820u
#endif
#ifndef GFP_NOWAIT
#define GFP_NOWAIT 0x0800u
#endif

/*
 * A component mask: which fields of a query's record count. Big-endian, as
 * in the kernel (__be64 on the wire): combine the IB_SA_PATH_REC_* bits with
 * | and pass the result as it is.
 */
typedef uint64_t ib_sa_comp_mask;
#define IB_SA_COMP_MASK(n) ((ib_sa_comp_mask)IBCM_BE64(1ULL << (n)))

#define IB_SA_PATH_REC_SERVICE_ID (IB_SA_COMP_MASK(0) | IB_SA_COMP_MASK(1))
#define IB_SA_PATH_REC_DGID IB_SA_COMP_MASK(2)
#define IB_SA_PATH_REC_SGID IB_SA_COMP_MASK(3)
#define IB_SA_PATH_REC_DLID IB_SA_COMP_MASK(4)
#define IB_SA_PATH_REC_SLID IB_SA_COMP_MASK(5)
#define IB_SA_PATH_REC_RAW_TRAFFIC IB_SA_COMP_MASK(6)
/* reserved: 7 */
#define IB_SA_PATH_REC_FLOW_LABEL IB_SA_COMP_MASK(8)
#define IB_SA_PATH_REC_HOP_LIMIT IB_SA_COMP_MASK(9)
#define IB_SA_PATH_REC_TRAFFIC_CLASS IB_SA_COMP_MASK(10)
#define IB_SA_PATH_REC_REVERSIBLE IB_SA_COMP_MASK(11)
#define IB_SA_PATH_REC_NUMB_PATH IB_SA_COMP_MASK(12)
#define IB_SA_PATH_REC_PKEY IB_SA_COMP_MASK(13)
#define IB_SA_PATH_REC_QOS_CLASS IB_SA_COMP_MASK(14)
#define IB_SA_PATH_REC_SL IB_SA_COMP_MASK(15)
#define IB_SA_PATH_REC_MTU_SELECTOR IB_SA_COMP_MASK(16)
#define IB_SA_PATH_REC_MTU IB_SA_COMP_MASK(17)
#define IB_SA_PATH_REC_RATE_SELECTOR IB_SA_COMP_MASK(18)
#define IB_SA_PATH_REC_RATE IB_SA_COMP_MASK(19)
#define IB_SA_PATH_REC_PACKET_LIFE_TIME_SELECTOR IB_SA_COMP_MASK(20)
#define IB_SA_PATH_REC_PACKET_LIFE_TIME IB_SA_COMP_MASK(21)
#define IB_SA_PATH_REC_PREFERENCE IB_SA_COMP_MASK(22)

/*
 * An SA client: 32 bytes of the caller's (a static in SRP and IPoIB). The
 * library never reads or writes them: it knows the client by its address,
 * so the struct must not move while registered. Zero-initialised or not,
 * it is usable once ib_sa_register_client() returned.
 */
struct ib_sa_client {
  uint64_t ibcm_reserved[4];
};

/* A query in flight: an opaque handle for ib_sa_cancel_query(). */
struct ib_sa_query;

/* Registers an SA client (no return value, as in the kernel). */
void ib_sa_register_client(struct ib_sa_client *client);

/*
 * Unregisters an SA client: returns once every query of the client has
 * completed and its callback has returned. Cancel them first to be quick.
 */
void ib_sa_unregister_client(struct ib_sa_client *client);

/*
 * Cancels a query: its callback gets -EINTR, once. Nothing happens if it
 * has completed (its callback may still be running or about to run).
 */
void ib_sa_cancel_query(int id, struct ib_sa_query *query);

/*
 * Asks the SA of port port_num for a path matching the fields of *rec that
 * comp_mask selects. Returns the query's id (>= 0) and sets *query, or
 * -errno; callback then runs exactly once, on the library's worker thread:
 * (0, the record, 1), or (-ETIMEDOUT | -EINTR | -EINVAL | -EIO, NULL, 0).
 */
int ib_sa_path_rec_get(struct ib_sa_client *client, struct ib_device *device, uint32_t port_num,
                       struct sa_path_rec *rec, ib_sa_comp_mask comp_mask,
                       unsigned long timeout_ms, gfp_t gfp_mask,
                       void (*callback)(int status, struct sa_path_rec *resp,
                                        unsigned int num_prs, void *context),
                       void *context, struct ib_sa_query **query);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* IB_SA_H */
