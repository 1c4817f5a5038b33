/* Both ends of a connection in one process, on the in-process fabric: a
 * server listening on loop1, a client on loop0 that connects (REQ, REP, RTU)
 * and disconnects (DREQ, DREP). The handlers run on the library's thread. */
#include <rdma/ib_cm.h>

#include <endian.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

#define SERVICE_ID 0x1234

static struct ib_cm_id *server_id;     /* the id REQ_RECEIVED came on */
static atomic_int established, timewait_exits;

static int cm_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event)
{
	switch (event->event) {
	case IB_CM_REQ_RECEIVED: {         /* server, on a new cm_id */
		const struct ib_cm_req_event_param *req = &event->param.req_rcvd;
		struct ib_cm_rep_param rep = {
			.qp_num = 0x222, .starting_psn = 1, .rnr_retry_count = 7,
			.responder_resources = req->responder_resources,
			.initiator_depth = req->initiator_depth,
			.private_data = "welcome", .private_data_len = 8,
		};
		printf("server: REQ from QP %#x: %s\n", req->remote_qpn,
		       (const char *)event->private_data);   /* 92 bytes */
		if (ib_send_cm_rep(cm_id, &rep))
			return -1;         /* non-zero: the CM destroys cm_id */
		server_id = cm_id;
		break;
	}
	case IB_CM_REP_RECEIVED:           /* client */
		printf("client: REP: %s\n", (const char *)event->private_data);
		ib_send_cm_rtu(cm_id, NULL, 0);
		break;
	case IB_CM_RTU_RECEIVED:           /* server */
		established = 1;
		break;
	case IB_CM_DREQ_RECEIVED:          /* server */
		ib_send_cm_drep(cm_id, NULL, 0);
		break;
	case IB_CM_TIMEWAIT_EXIT:          /* each id, back in IB_CM_IDLE */
		timewait_exits++;
		break;
	default:
		break;
	}
	return 0;
}

/* Waits up to 10 s for *counter to reach n. */
static int wait_for(atomic_int *counter, int n)
{
	for (int ms = 0; ms < 10000; ms++) {
		if (*counter >= n)
			return 0;
		nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
	}
	fprintf(stderr, "timed out\n");
	return -1;
}

int main(void)
{
	struct ib_device *server_dev = ibcm_open_device("loop1");
	struct ib_device *client_dev = ibcm_open_device("loop0");
	if (IS_ERR(server_dev) || IS_ERR(client_dev))
		return 1;                  /* ERR_PTR(-errno) */

	/* The path from the client's port 1 to the server's GID. */
	union ib_gid server_gid;
	struct sa_path_rec path;
	if (ibcm_query_gid(server_dev, 1, 0, &server_gid) ||
	    ibcm_init_path(client_dev, 1, &server_gid, &path))
		return 1;

	struct ib_cm_id *listener = ib_create_cm_id(server_dev, cm_handler, NULL);
	struct ib_cm_id *client = ib_create_cm_id(client_dev, cm_handler, NULL);
	if (IS_ERR(listener) || IS_ERR(client) ||
	    ib_cm_listen(listener, htobe64(SERVICE_ID)))
		return 1;

	struct ib_cm_req_param req = {
		.primary_path = &path,
		.service_id = htobe64(SERVICE_ID),
		.qp_num = 0x111, .qp_type = IB_QPT_RC, .starting_psn = 1,
		.responder_resources = 1, .initiator_depth = 1,
		.remote_cm_response_timeout = 20,  /* 4.096 us << 20: 4.3 s */
		.local_cm_response_timeout = 20,
		.max_cm_retries = 5, .retry_count = 7, .rnr_retry_count = 7,
		.private_data = "hello", .private_data_len = 6,
	};
	if (ib_send_cm_req(client, &req) || wait_for(&established, 1))
		return 1;
	printf("connected: comm IDs %#x and %#x\n", be32toh(client->local_id),
	       be32toh(client->remote_id));

	if (ib_send_cm_dreq(client, NULL, 0) || wait_for(&timewait_exits, 2))
		return 1;
	printf("disconnected\n");

	ib_destroy_cm_id(client);
	ib_destroy_cm_id(server_id);
	ib_destroy_cm_id(listener);
	return ibcm_close_device(client_dev) || ibcm_close_device(server_dev);
}
