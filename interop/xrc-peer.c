/*
 * xrc-peer: VM B's XRC end in the two-VM interoperability suite.
 *
 * rdma-core's rdma_xserver / rdma_xclient (-c x) make their XRC verbs objects
 * through librdmacm (an XRC domain, an XRC SRQ, XRC QPs), and rdma_rxe has
 * none: in the VM, ibv_open_xrcd fails with EOPNOTSUPP and `rdma_xserver -c x`
 * stops at "rdma_create_ep: Operation not supported". The kernel's CM does not
 * need them. This program drives the kernel's rdma_cm and CM through
 * librdmacm as rdma_xserver / rdma_xclient do (RDMA_PS_IB, ids of type
 * IBV_QPT_XRC_RECV / IBV_QPT_XRC_SEND, the REP's private data a 32-bit
 * big-endian number, as rdma_xserver sends its SRQ number), with the QP left
 * to the user as librdmacm allows: rdma_create_ep without QP attributes, the
 * QPN in struct rdma_conn_param, rdma_establish. The kernel then formats and
 * parses every XRC CM message as it would with real QPs; no data can flow.
 *
 *   xrc-peer server PORT COUNT QPN
 *       accepts COUNT XRC connections as XRC_TGT with QPNs QPN, QPN+1, ...
 *       (each REP's private data: its QPN); each ends when A disconnects
 *       (DISCONNECTED, then rdma_disconnect sends the DREP)
 *   xrc-peer client IP PORT QPN PEER_QPN
 *       connects as XRC_INI with QPN; the QPN the kernel read from A's REP
 *       (and A's private data) must be PEER_QPN; establishes (RTU), then
 *       disconnects (DREQ) and waits for A's DREP
 *
 * Exit status 0: every check held. Output lines start with "xrc-peer:".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CONN 8

static int failed(const char *what) {
  printf("xrc-peer: FAIL %s: %s\n", what, strerror(errno));
  return 1;
}

static const char *event_str(const struct rdma_cm_event *ev) {
  return rdma_event_str(ev->event);
}

/* The 32-bit big-endian number in an event's private data (0 if none). */
static uint32_t pd_qpn(const struct rdma_conn_param *conn) {
  uint32_t be = 0;
  if (conn->private_data && conn->private_data_len >= sizeof(be))
    memcpy(&be, conn->private_data, sizeof(be));
  return ntohl(be);
}

static int server(const char *port, int count, uint32_t qpn) {
  struct rdma_addrinfo hints = {.ai_flags = RAI_PASSIVE,
                                .ai_port_space = RDMA_PS_IB,
                                .ai_qp_type = IBV_QPT_XRC_RECV};
  struct rdma_addrinfo *res;
  int rc = rdma_getaddrinfo(NULL, port, &hints, &res);
  if (rc) {
    printf("xrc-peer: FAIL rdma_getaddrinfo: %s\n", gai_strerror(rc));
    return 1;
  }
  struct rdma_cm_id *listen_id, *ids[MAX_CONN];
  rc = rdma_create_ep(&listen_id, res, NULL, NULL); /* no QP attributes: no QP */
  rdma_freeaddrinfo(res);
  if (rc)
    return failed("rdma_create_ep");
  /* Asynchronous from here: a passive side learns of A's DREQ as an event. */
  struct rdma_event_channel *ch = rdma_create_event_channel();
  if (!ch || rdma_migrate_id(listen_id, ch) || rdma_listen(listen_id, count))
    return failed("listen");
  printf("xrc-peer: XRC_TGT listener on port %s (RDMA_PS_IB)\n", port);
  fflush(stdout);
  int accepted = 0, established = 0, closed = 0;
  while (closed < count) {
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(ch, &ev))
      return failed("rdma_get_cm_event");
    struct rdma_cm_id *id = ev->id;
    printf("xrc-peer: %s (status %d)\n", event_str(ev), ev->status);
    switch (ev->event) {
    case RDMA_CM_EVENT_CONNECT_REQUEST: {
      if (accepted == count || id->qp_type != IBV_QPT_XRC_RECV) {
        printf("xrc-peer: FAIL request %d of type %d\n", accepted + 1, id->qp_type);
        return 1;
      }
      uint32_t mine = qpn + (uint32_t)accepted, be = htonl(mine);
      printf("xrc-peer: REQ from XRC_INI QPN 0x%06x; accepting as XRC_TGT QPN 0x%06x\n",
             ev->param.conn.qp_num, mine);
      struct rdma_conn_param param = {.private_data = &be,
                                      .private_data_len = sizeof(be),
                                      .rnr_retry_count = 7,
                                      .srq = 1,
                                      .qp_num = mine};
      if (rdma_accept(id, &param))
        return failed("rdma_accept");
      ids[accepted++] = id;
      break;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
      established++;
      break;
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: /* the timewait of a connection A closed */
      break;
    case RDMA_CM_EVENT_DISCONNECTED:
      /* A's DREQ: the DREP goes out with rdma_disconnect. */
      if (rdma_disconnect(id))
        return failed("rdma_disconnect");
      closed++;
      break;
    default:
      printf("xrc-peer: FAIL unexpected event %s\n", event_str(ev));
      return 1;
    }
    rdma_ack_cm_event(ev);
  }
  printf("xrc-peer: %d XRC connections accepted, %d established, %d disconnected by A\n",
         accepted, established, closed);
  for (int i = 0; i < accepted; i++)
    rdma_destroy_id(ids[i]);
  rdma_destroy_id(listen_id);
  rdma_destroy_event_channel(ch);
  return established == count ? 0 : 1;
}

static int client(const char *ip, const char *port, uint32_t qpn, uint32_t peer_qpn) {
  struct rdma_addrinfo hints = {.ai_port_space = RDMA_PS_IB, .ai_qp_type = IBV_QPT_XRC_SEND};
  struct rdma_addrinfo *res;
  int rc = rdma_getaddrinfo(ip, port, &hints, &res);
  if (rc) {
    printf("xrc-peer: FAIL rdma_getaddrinfo: %s\n", gai_strerror(rc));
    return 1;
  }
  struct rdma_cm_id *id;
  rc = rdma_create_ep(&id, res, NULL, NULL); /* synchronous, no QP */
  rdma_freeaddrinfo(res);
  if (rc)
    return failed("rdma_create_ep");
  struct rdma_conn_param param = {
      .initiator_depth = 1, .retry_count = 7, .rnr_retry_count = 7, .qp_num = qpn};
  if (rdma_connect(id, &param))
    return failed("rdma_connect");
  /* Without a QP of librdmacm's, the REP is the user's to finish. */
  if (id->event->event != RDMA_CM_EVENT_CONNECT_RESPONSE) {
    printf("xrc-peer: FAIL rdma_connect gave %s\n", event_str(id->event));
    return 1;
  }
  uint32_t got = id->event->param.conn.qp_num, sent = pd_qpn(&id->event->param.conn);
  printf("xrc-peer: REP: the kernel's remote QPN 0x%06x, A's private data 0x%06x, "
         "expected 0x%06x\n",
         got, sent, peer_qpn);
  if (got != peer_qpn || sent != peer_qpn) {
    printf("xrc-peer: FAIL the kernel read QPN 0x%06x from A's REP\n", got);
    return 1;
  }
  if (rdma_establish(id))
    return failed("rdma_establish");
  printf("xrc-peer: established (RTU sent); disconnecting\n");
  fflush(stdout);
  /* Synchronous: returns with DISCONNECTED, once A's DREP came (or the DREQ
   * timed out: status -ETIMEDOUT). */
  if (rdma_disconnect(id))
    return failed("rdma_disconnect");
  printf("xrc-peer: %s (status %d)\n", event_str(id->event), id->event->status);
  rc = id->event->event == RDMA_CM_EVENT_DISCONNECTED && id->event->status == 0 ? 0 : 1;
  rdma_destroy_ep(id);
  return rc;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 5 && strcmp(argv[1], "server") == 0 && atoi(argv[3]) >= 1 &&
      atoi(argv[3]) <= MAX_CONN)
    return server(argv[2], atoi(argv[3]), (uint32_t)strtoul(argv[4], NULL, 0));
  if (argc == 6 && strcmp(argv[1], "client") == 0)
    return client(argv[2], argv[3], (uint32_t)strtoul(argv[4], NULL, 0),
                  (uint32_t)strtoul(argv[5], NULL, 0));
  fprintf(stderr, "usage: xrc-peer server PORT COUNT QPN | client IP PORT QPN PEER_QPN\n");
  return 2;
}
