/*
 * ibcm-interop: VM A's side of the two-VM interoperability suite.
 *
 * libib_cm on rxe0 talks to the Linux kernel's CM in VM B, which rdma-core's
 * own tools drive through rdma_cm (rping, rdma_server, rdma_client, ucmatose,
 * udaddy). Everything the kernel's rdma_cm expects of a peer is done here by
 * hand on top of the kernel CM API: the RDMA CM service IDs and private-data
 * header, a real QP made with libibverbs and moved with ib_cm_init_qp_attr,
 * and each tool's data protocol.
 *
 *   ibcm-interop rping-client PORT    A connects to `rping -s`, runs the rping
 *                                     protocol (RDMA READ/WRITE by the server,
 *                                     data checked), A disconnects (DREQ with
 *                                     220 bytes of private data)
 *   ibcm-interop echo-client PORT     A connects to `rdma_server`, 16 bytes each
 *                                     way, the kernel disconnects, A answers
 *                                     with a DREP (224 bytes of private data)
 *   ibcm-interop echo-server PORT     `rdma_client` connects to A: 16 bytes each
 *                                     way, the kernel disconnects
 *   ibcm-interop msg-server PORT      `ucmatose` connects to A: 10 messages each
 *                                     way, A disconnects
 *   ibcm-interop sidr-server PORT     `udaddy` resolves A's UD QP (SIDR), 10
 *                                     datagrams each way
 *   ibcm-interop sidr-client PORT     A resolves `udaddy`'s UD QP, 10 each way
 *   ibcm-interop stale-dreq PORT      A's DREQ for a connection the kernel no
 *                                     longer has: the kernel's stateless DREP
 *   ibcm-interop stale-drep PORT      the kernel's DREQ for a connection A has
 *                                     destroyed: A's stateless DREP
 *   ibcm-interop xrc-client PORT      two XRC_INI connections to the kernel's
 *                                     XRC_TGT (xrc-peer server in B): the QPN
 *                                     from each REP's EECN, A disconnects
 *   ibcm-interop xrc-server PORT      the kernel's XRC_INI (xrc-peer client)
 *                                     connects to A as XRC_TGT, the kernel
 *                                     disconnects
 *   ibcm-interop spoof-req PORT       a tenant of ibcmd names another user's
 *                                     QP ($IBCM_VICTIM_QPN), the kernel's and
 *                                     its own in REQs: only its own leaves
 *
 * rdma_rxe has no XRC verbs objects (ibv_open_xrcd: EOPNOTSUPP), so the xrc-*
 * modes exchange the CM messages only: their QPNs are not backed by QPs and no
 * data flows (interop/xrc-peer.c does the same in B, through librdmacm).
 *
 * The peer is $SRT_PEER_IP, this side $SRT_SELF_IP, the device $IBCM_DEV_A
 * (rxe0). The stale-* modes run the shell commands $IBCM_HOOK_<NAME> at fixed
 * points (the scenario uses them to act in VM B); a failing hook fails the run.
 * Exit status 0: every check held.
 */
#include "../c-tests/common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <time.h>
#include <unistd.h>

/* rdma_cm's port spaces (rdma/rdma_cma.h): service ID = ps << 16 | port. */
#define RDMA_PS_TCP 0x0106
#define RDMA_PS_UDP 0x0111
#define RDMA_PS_IB 0x013f /* rdma_xserver / rdma_xclient -c x */
#define RDMA_UDP_QKEY 0x01234567u /* the Q_Key rdma_cm gives RDMA_PS_UDP */
#define CMA_HDR_LEN 36
#define WAIT_MS 30000 /* TCG is slow: generous, but bounded */

#define MSG_COUNT 10  /* ucmatose and udaddy defaults */
#define MSG_SIZE 100
#define GRH_LEN 40

static uint32_t self_ip, peer_ip; /* network order */
static union ib_gid self_gid, peer_gid;
static uint16_t tool_port;

/* ---- the rdma_cm private-data header (struct cma_hdr, cma.c) ------------- */

/* cma_version 0, IP version 4 in the high nibble, the source port, then the
 * source and destination addresses, each in the last 4 bytes of 16. */
static void cma_hdr_format(uint8_t hdr[CMA_HDR_LEN], uint32_t src, uint32_t dst,
                           uint16_t src_port) {
  memset(hdr, 0, CMA_HDR_LEN);
  hdr[0] = 0x00;
  hdr[1] = 4 << 4;
  hdr[2] = src_port >> 8;
  hdr[3] = src_port & 0xff;
  memcpy(hdr + 4 + 12, &src, 4);
  memcpy(hdr + 20 + 12, &dst, 4);
}

/* The header of a REQ or SIDR_REQ the kernel's rdma_cm sent to A. */
static void cma_hdr_check(const uint8_t *hdr) {
  uint32_t src, dst;
  memcpy(&src, hdr + 16, 4);
  memcpy(&dst, hdr + 32, 4);
  char s[INET_ADDRSTRLEN], d[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &src, s, sizeof(s));
  inet_ntop(AF_INET, &dst, d, sizeof(d));
  printf("rdma_cm header: version %u, IP version %u, source port %u, %s -> %s\n", hdr[0],
         hdr[1] >> 4, (unsigned)(hdr[2] << 8 | hdr[3]), s, d);
  CHECK_EQ(hdr[0], 0);
  CHECK_EQ(hdr[1] >> 4, 4);
  CHECK_EQ(src, peer_ip);
  CHECK_EQ(dst, self_ip);
}

static uint64_t service_id(uint16_t ps) {
  return htobe64((uint64_t)ps << 16 | tool_port);
}

static void gid_from_ipv4(union ib_gid *gid, uint32_t ip) {
  memset(gid, 0, sizeof(*gid));
  gid->raw[10] = gid->raw[11] = 0xff;
  memcpy(gid->raw + 12, &ip, 4);
}

static uint32_t env_ip(const char *name) {
  const char *s = getenv(name);
  struct in_addr a;
  if (!s || inet_pton(AF_INET, s, &a) != 1)
    test_fail(__FILE__, __LINE__, "$%s must be an IPv4 address", name);
  return a.s_addr;
}

static void run_hook(const char *name) {
  char var[64];
  snprintf(var, sizeof(var), "IBCM_HOOK_%s", name);
  const char *cmd = getenv(var);
  if (!cmd)
    return;
  printf("hook %s: %s\n", name, cmd);
  int rc = system(cmd);
  if (rc != 0)
    test_fail(__FILE__, __LINE__, "hook %s failed (status %d)", name, rc);
}

static uint32_t random_psn(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint32_t)(ts.tv_nsec ^ getpid()) & 0xffffff;
}

/* ---- verbs: one QP, one CQ, one registered buffer ------------------------- */

struct verbs {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_mr *mr;
  uint8_t *buf;
  size_t len;
  int sends_done, recvs_done;
};

static struct ibv_context *verbs_open_device(void) {
  struct ibv_context *ctx = NULL;
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  CHECK(list != NULL);
  for (int i = 0; i < n && !ctx; i++)
    if (strcmp(ibv_get_device_name(list[i]), dev_a_name()) == 0)
      ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  if (!ctx)
    test_fail(__FILE__, __LINE__, "no verbs device %s", dev_a_name());
  return ctx;
}

static void verbs_open(struct verbs *v, enum ibv_qp_type type, size_t len) {
  memset(v, 0, sizeof(*v));
  v->ctx = verbs_open_device();
  CHECK((v->pd = ibv_alloc_pd(v->ctx)) != NULL);
  CHECK((v->cq = ibv_create_cq(v->ctx, 64, NULL, NULL, 0)) != NULL);
  struct ibv_qp_init_attr init = {
      .send_cq = v->cq,
      .recv_cq = v->cq,
      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1, .max_recv_sge = 1},
      .qp_type = type,
  };
  CHECK((v->qp = ibv_create_qp(v->pd, &init)) != NULL);
  v->len = len;
  CHECK((v->buf = calloc(1, len)) != NULL);
  v->mr = ibv_reg_mr(v->pd, v->buf, len,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE);
  CHECK(v->mr != NULL);
  printf("verbs: %s QP 0x%06x on %s\n", type == IBV_QPT_RC ? "RC" : "UD", v->qp->qp_num,
         dev_a_name());
}

static void verbs_close(struct verbs *v) {
  CHECK_EQ(ibv_destroy_qp(v->qp), 0);
  CHECK_EQ(ibv_dereg_mr(v->mr), 0);
  CHECK_EQ(ibv_destroy_cq(v->cq), 0);
  CHECK_EQ(ibv_dealloc_pd(v->pd), 0);
  CHECK_EQ(ibv_close_device(v->ctx), 0);
  free(v->buf);
}

/* Moves the QP to `state` with what ib_cm_init_qp_attr gives; a non-NULL
 * `rq_psn` replaces the receive PSN of an RTR (see accept_from_kernel). */
static void qp_modify_cm_psn(struct verbs *v, struct ib_cm_id *id, enum ibv_qp_state state,
                             const uint32_t *rq_psn) {
  struct ibv_qp_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.qp_state = state;
  int mask = 0;
  CHECK_EQ(ib_cm_init_qp_attr(id, &attr, &mask), 0);
  if (rq_psn) {
    CHECK(mask & IBV_QP_RQ_PSN);
    attr.rq_psn = *rq_psn;
  }
  int rc = ibv_modify_qp(v->qp, &attr, mask);
  if (rc)
    test_fail(__FILE__, __LINE__, "ibv_modify_qp(state %d, mask 0x%x): %s", state, mask,
              strerror(rc));
  printf("QP 0x%06x -> %s (ib_cm_init_qp_attr mask 0x%x", v->qp->qp_num,
         state == IBV_QPS_INIT ? "INIT" : state == IBV_QPS_RTR ? "RTR" : "RTS", mask);
  if (rq_psn)
    printf(", receive PSN 0x%06x of the REP", *rq_psn);
  printf(")\n");
}

static void qp_modify_cm(struct verbs *v, struct ib_cm_id *id, enum ibv_qp_state state) {
  qp_modify_cm_psn(v, id, state, NULL);
}

/* UD QPs have no CM state to ask: INIT (Q_Key), RTR, RTS by hand. */
static void qp_ud_ready(struct verbs *v) {
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                          .qkey = RDMA_UDP_QKEY};
  CHECK_EQ(ibv_modify_qp(v->qp, &a,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
           0);
  a.qp_state = IBV_QPS_RTR;
  CHECK_EQ(ibv_modify_qp(v->qp, &a, IBV_QP_STATE), 0);
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  CHECK_EQ(ibv_modify_qp(v->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 0);
}

static void post_recv(struct verbs *v, size_t off, uint32_t len) {
  struct ibv_sge sge = {.addr = (uintptr_t)(v->buf + off), .length = len, .lkey = v->mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = off, .sg_list = &sge, .num_sge = 1}, *bad;
  CHECK_EQ(ibv_post_recv(v->qp, &wr, &bad), 0);
}

static void post_send(struct verbs *v, size_t off, uint32_t len, struct ibv_ah *ah,
                      uint32_t remote_qpn) {
  struct ibv_sge sge = {.addr = (uintptr_t)(v->buf + off), .length = len, .lkey = v->mr->lkey};
  struct ibv_send_wr wr = {.wr_id = off, .sg_list = &sge, .num_sge = 1,
                           .opcode = ah ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED}, *bad;
  if (ah) { /* udaddy's datagrams carry the sender's QPN as immediate data */
    wr.imm_data = htobe32(v->qp->qp_num);
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = remote_qpn;
    wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
  }
  CHECK_EQ(ibv_post_send(v->qp, &wr, &bad), 0);
}

/* Polls until `recvs` more receives and `sends` more sends have completed;
 * returns the last receive completion. */
static struct ibv_wc poll_until(struct verbs *v, int recvs, int sends) {
  struct ibv_wc wc, last_recv;
  memset(&last_recv, 0, sizeof(last_recv));
  int want_r = v->recvs_done + recvs, want_s = v->sends_done + sends;
  long long deadline = now_ms() + WAIT_MS;
  while (v->recvs_done < want_r || v->sends_done < want_s) {
    int n = ibv_poll_cq(v->cq, 1, &wc);
    CHECK(n >= 0);
    if (n == 0) {
      if (now_ms() > deadline)
        test_fail(__FILE__, __LINE__, "data: %d/%d receives, %d/%d sends after %d ms",
                  v->recvs_done, want_r, v->sends_done, want_s, WAIT_MS);
      usleep(200);
      continue;
    }
    if (wc.status != IBV_WC_SUCCESS)
      test_fail(__FILE__, __LINE__, "completion error: %s (opcode %d)",
                ibv_wc_status_str(wc.status), wc.opcode);
    if (wc.opcode & IBV_WC_RECV) {
      v->recvs_done++;
      last_recv = wc;
    } else {
      v->sends_done++;
    }
  }
  return last_recv;
}

/* ---- the CM side ----------------------------------------------------------- */

static int handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  struct cm_ev *e = capture_event(cm_id, event);
  printf("event %s on id %p (state %s)\n", event_name(event->event), (void *)cm_id,
         state_name(cm_id->state));
  publish_event(e);
  return 0;
}

/* A new id on A's side, the path to B, and rdma_cm's header for a request
 * from this side (an ephemeral-looking source port). */
static struct ib_cm_id *active_id(struct sa_path_rec *path, uint8_t hdr[CMA_HDR_LEN]) {
  struct ib_cm_id *id = ib_create_cm_id(dev_a, handler, NULL);
  CHECK(!IS_ERR(id));
  CHECK_EQ(ibcm_init_path(dev_a, 1, &peer_gid, path), 0);
  cma_hdr_format(hdr, self_ip, peer_ip, (uint16_t)(0xc000 | (getpid() & 0x3fff)));
  return id;
}

/* A REQ as rdma_cm makes one, for QP `qp_num` of `qp_type` on rdma_cm's port
 * space `ps`, with its header `hdr` (the library leaves out what an XRC_INI
 * REQ does not carry, as cm_format_req does). */
static struct ib_cm_req_param rdma_cm_req(struct sa_path_rec *path, uint8_t hdr[CMA_HDR_LEN],
                                          uint16_t ps, uint32_t qp_num,
                                          enum ib_qp_type qp_type) {
  struct ib_cm_req_param req = {
      .primary_path = path,
      .service_id = service_id(ps),
      .qp_num = qp_num,
      .qp_type = qp_type,
      .starting_psn = random_psn(),
      .private_data = hdr,
      .private_data_len = CMA_HDR_LEN,
      .responder_resources = 1,
      .initiator_depth = 1,
      .remote_cm_response_timeout = 20, /* rdma_cm's CMA_CM_RESPONSE_TIMEOUT */
      .local_cm_response_timeout = 20,
      .flow_control = 1,
      .retry_count = 7,
      .rnr_retry_count = 7,
      .max_cm_retries = 15,
  };
  return req;
}

/* A's REQ to a kernel rdma_cm listener on RDMA_PS_TCP, REP, RTU: the QP goes
 * INIT (where `post` posts the receives: not before, rxe refuses them in
 * RESET), RTR, RTS on the way. */
static struct ib_cm_id *connect_to_kernel(struct verbs *v, void (*post)(struct verbs *)) {
  struct sa_path_rec path;
  uint8_t hdr[CMA_HDR_LEN];
  struct ib_cm_id *id = active_id(&path, hdr);
  struct ib_cm_req_param req = rdma_cm_req(&path, hdr, RDMA_PS_TCP, v->qp->qp_num, IB_QPT_RC);
  long long t0 = now_ms();
  CHECK_EQ(ib_send_cm_req(id, &req), 0);
  qp_modify_cm(v, id, IBV_QPS_INIT); /* from REQ_SENT on, as the kernel allows */
  post(v);
  const struct cm_ev *rep = wait_event_from(0, id, IB_CM_REP_RECEIVED, WAIT_MS);
  printf("REP: remote QPN 0x%06x, PSN 0x%06x, responder resources %u, initiator depth %u\n",
         rep->param.rep_rcvd.remote_qpn, rep->param.rep_rcvd.starting_psn,
         rep->param.rep_rcvd.responder_resources, rep->param.rep_rcvd.initiator_depth);
  qp_modify_cm(v, id, IBV_QPS_RTR);
  qp_modify_cm(v, id, IBV_QPS_RTS);
  CHECK_EQ(ib_send_cm_rtu(id, NULL, 0), 0);
  CHECK_STATE(id, IB_CM_ESTABLISHED);
  printf("connected in %lld ms (REQ -> RTU)\n", now_ms() - t0);
  return id;
}

/* A's listener for rdma_cm's port space `ps`; then hook LISTENING starts
 * the kernel-side client. */
static struct ib_cm_id *listen_on(uint16_t ps) {
  struct ib_cm_id *listener = ib_create_cm_id(dev_a, handler, NULL);
  CHECK(!IS_ERR(listener));
  CHECK_EQ(ib_cm_listen(listener, service_id(ps)), 0);
  printf("listening on service ID 0x%016llx\n", (unsigned long long)be64toh(service_id(ps)));
  run_hook("LISTENING");
  return listener;
}

static const struct cm_ev *wait_any(enum ib_cm_event_type type) {
  return wait_event_from(0, NULL, type, WAIT_MS);
}

/* The kernel's REQ to A's listener: check it, make the QP (receives posted by
 * `post`), INIT, RTR, REP, wait for the RTU (the kernel may MRA first), RTS. */
static struct ib_cm_id *accept_from_kernel(struct verbs *v, void (*post)(struct verbs *)) {
  struct ib_cm_id *listener = listen_on(RDMA_PS_TCP);
  const struct cm_ev *req = wait_any(IB_CM_REQ_RECEIVED);
  long long t0 = now_ms();
  struct ib_cm_id *id = req->id;
  const struct ib_cm_req_event_param *p = &req->param.req_rcvd;
  printf("REQ: service ID 0x%016llx, remote QPN 0x%06x, %s, responder resources %u, "
         "initiator depth %u, path %s\n",
         (unsigned long long)be64toh(id->service_id), p->remote_qpn,
         p->qp_type == IB_QPT_RC ? "RC" : "not RC", p->responder_resources, p->initiator_depth,
         req->has_path ? "given" : "missing");
  CHECK(p->qp_type == IB_QPT_RC);
  CHECK(req->has_path);
  CHECK(memcmp(req->path.dgid.raw, peer_gid.raw, 16) == 0 ||
        memcmp(req->path.sgid.raw, peer_gid.raw, 16) == 0);
  cma_hdr_check(req->pd);
  qp_modify_cm(v, id, IBV_QPS_INIT);
  post(v);
  /* The kernel's CM learns the passive side's receive PSN only from
   * ib_send_cm_rep (it is the REP's starting PSN), so RTR before the REP
   * takes it from the caller, as IPoIB-CM and rdma_cm do. */
  uint32_t psn = random_psn();
  qp_modify_cm_psn(v, id, IBV_QPS_RTR, &psn);
  struct ib_cm_rep_param rep = {
      .qp_num = v->qp->qp_num,
      .starting_psn = psn,
      .responder_resources = p->initiator_depth < 1 ? p->initiator_depth : 1,
      .initiator_depth = p->responder_resources < 1 ? p->responder_resources : 1,
      .flow_control = 1,
      .rnr_retry_count = 7,
  };
  CHECK_EQ(ib_send_cm_rep(id, &rep), 0);
  wait_event_from(0, id, IB_CM_RTU_RECEIVED, WAIT_MS);
  CHECK_STATE(id, IB_CM_ESTABLISHED);
  qp_modify_cm(v, id, IBV_QPS_RTS);
  printf("accepted in %lld ms (REQ -> RTU)\n", now_ms() - t0);
  ib_destroy_cm_id(listener);
  return id;
}

static uint8_t dreq_pd[IB_CM_DREQ_PRIVATE_DATA_SIZE], drep_pd[IB_CM_DREP_PRIVATE_DATA_SIZE];

/* A disconnects: DREQ with 220 bytes, the kernel's DREP, timewait, exit. */
static void disconnect_from_a(struct ib_cm_id *id) {
  long long t0 = now_ms();
  fill_pattern(dreq_pd, sizeof(dreq_pd), 0xd1);
  CHECK_EQ(ib_send_cm_dreq(id, dreq_pd, sizeof(dreq_pd)), 0);
  const struct cm_ev *drep = wait_event_from(0, id, IB_CM_DREP_RECEIVED, WAIT_MS);
  printf("DREP received %lld ms after the DREQ (state %s)\n", now_ms() - t0,
         state_name(drep->state));
  CHECK_EQ(drep->state, IB_CM_TIMEWAIT);
  wait_event_from(0, id, IB_CM_TIMEWAIT_EXIT, WAIT_MS);
  printf("TIMEWAIT_EXIT %lld ms after the DREQ\n", now_ms() - t0);
  CHECK_STATE(id, IB_CM_IDLE);
  ib_destroy_cm_id(id);
}

/* The kernel disconnects: DREQ_RECEIVED, A's DREP with 224 bytes, timewait. */
static void disconnect_from_kernel(struct ib_cm_id *id) {
  const struct cm_ev *dreq = wait_event_from(0, id, IB_CM_DREQ_RECEIVED, WAIT_MS);
  long long t0 = now_ms();
  CHECK_EQ(dreq->state, IB_CM_DREQ_RCVD);
  fill_pattern(drep_pd, sizeof(drep_pd), 0xd2);
  CHECK_EQ(ib_send_cm_drep(id, drep_pd, sizeof(drep_pd)), 0);
  CHECK_STATE(id, IB_CM_TIMEWAIT);
  wait_event_from(0, id, IB_CM_TIMEWAIT_EXIT, WAIT_MS);
  printf("DREQ received, DREP sent, TIMEWAIT_EXIT %lld ms later\n", now_ms() - t0);
  CHECK_STATE(id, IB_CM_IDLE);
  ib_destroy_cm_id(id);
}

/* ---- scenarios --------------------------------------------------------------- */

/* rping's wire format: where to RDMA READ from or WRITE to. */
struct rping_rdma_info {
  uint64_t buf; /* __be64 */
  uint32_t rkey; /* __be32 */
  uint32_t size; /* __be32 */
};
#define RPING_SIZE 64 /* rping's default -S */
#define RPING_COUNT 10
enum { OFF_RECV = 0, OFF_SEND = 64, OFF_START = 128, OFF_RDMA = 256, RPING_BUF = 512 };

static void rping_advertise(struct verbs *v, size_t off) {
  struct rping_rdma_info info = {.buf = htobe64((uintptr_t)(v->buf + off)),
                                 .rkey = htobe32(v->mr->rkey),
                                 .size = htobe32(RPING_SIZE)};
  memcpy(v->buf + OFF_SEND, &info, sizeof(info));
  post_send(v, OFF_SEND, sizeof(info), NULL, 0);
}

static void post_rping_recv(struct verbs *v) {
  post_recv(v, OFF_RECV, sizeof(struct rping_rdma_info));
}

/* rping's client loop: advertise the ping buffer (the server RDMA READs it),
 * advertise the sink (the server RDMA WRITEs the ping back), compare. */
static int mode_rping_client(void) {
  struct verbs v;
  verbs_open(&v, IBV_QPT_RC, RPING_BUF);
  struct ib_cm_id *id = connect_to_kernel(&v, post_rping_recv);
  char qpn[16];
  snprintf(qpn, sizeof(qpn), "0x%06x", v.qp->qp_num);
  setenv("IBCM_QPN", qpn, 1);
  run_hook("ESTABLISHED"); /* scenario 12 attacks the connection here */
  long long t0 = now_ms();
  for (int ping = 0; ping < RPING_COUNT; ping++) {
    char *start = (char *)v.buf + OFF_START, *sink = (char *)v.buf + OFF_RDMA;
    int cc = snprintf(start, RPING_SIZE, "rdma-ping-%d: ", ping);
    for (int i = cc; i < RPING_SIZE; i++)
      start[i] = (char)(65 + (ping + i) % 58);
    start[RPING_SIZE - 1] = 0;
    memset(sink, 0, RPING_SIZE);
    rping_advertise(&v, OFF_START);
    struct ibv_wc wc = poll_until(&v, 1, 1); /* the server's go-ahead after its READ */
    CHECK_EQ(wc.byte_len, sizeof(struct rping_rdma_info));
    post_rping_recv(&v);
    rping_advertise(&v, OFF_RDMA);
    poll_until(&v, 1, 1); /* its go-ahead after the WRITE */
    post_rping_recv(&v);
    if (memcmp(start, sink, RPING_SIZE) != 0)
      test_fail(__FILE__, __LINE__, "ping %d: the server wrote back \"%.64s\", sent \"%.64s\"",
                ping, sink, start);
  }
  printf("data: %d rping round trips (RDMA READ + WRITE by the kernel side), all %d bytes "
         "equal, %lld ms\n",
         RPING_COUNT, RPING_SIZE, now_ms() - t0);
  disconnect_from_a(id);
  verbs_close(&v);
  return 0;
}

/* 16 bytes each way, as rdma_server / rdma_client do. */
static void echo_exchange(struct verbs *v, int send_first) {
  fill_pattern(v->buf + 64, 16, 0xec);
  if (send_first) {
    post_send(v, 64, 16, NULL, 0);
    struct ibv_wc wc = poll_until(v, 1, 1);
    CHECK_EQ(wc.byte_len, 16);
  } else {
    struct ibv_wc wc = poll_until(v, 1, 0);
    CHECK_EQ(wc.byte_len, 16);
    memcpy(v->buf + 64, v->buf, 16);
    post_send(v, 64, 16, NULL, 0);
    poll_until(v, 0, 1);
  }
  printf("data: 16 bytes sent, 16 received\n");
}

static void post_echo_recv(struct verbs *v) { post_recv(v, 0, 16); }

static int mode_echo_client(void) {
  struct verbs v;
  verbs_open(&v, IBV_QPT_RC, 128);
  struct ib_cm_id *id = connect_to_kernel(&v, post_echo_recv);
  echo_exchange(&v, 1);
  disconnect_from_kernel(id);
  verbs_close(&v);
  return 0;
}

static int mode_echo_server(void) {
  struct verbs v;
  verbs_open(&v, IBV_QPT_RC, 128);
  struct ib_cm_id *id = accept_from_kernel(&v, post_echo_recv);
  echo_exchange(&v, 0);
  disconnect_from_kernel(id);
  verbs_close(&v);
  return 0;
}

static void post_msg_recvs(struct verbs *v) {
  for (int i = 0; i < MSG_COUNT; i++)
    post_recv(v, (size_t)i * MSG_SIZE, MSG_SIZE);
}

/* ucmatose's client receives MSG_COUNT messages, answers as many, then waits
 * for the server (A) to disconnect. */
static int mode_msg_server(void) {
  struct verbs v;
  verbs_open(&v, IBV_QPT_RC, 2 * MSG_COUNT * MSG_SIZE);
  struct ib_cm_id *id = accept_from_kernel(&v, post_msg_recvs);
  long long t0 = now_ms();
  for (int i = 0; i < MSG_COUNT; i++) {
    size_t off = (size_t)(MSG_COUNT + i) * MSG_SIZE;
    fill_pattern(v.buf + off, MSG_SIZE, (unsigned)i);
    post_send(&v, off, MSG_SIZE, NULL, 0);
  }
  poll_until(&v, MSG_COUNT, MSG_COUNT);
  printf("data: %d messages of %d bytes each way, %lld ms\n", MSG_COUNT, MSG_SIZE,
         now_ms() - t0);
  disconnect_from_a(id);
  verbs_close(&v);
  return 0;
}

static void post_ud_recvs(struct verbs *v) {
  for (int i = 0; i < MSG_COUNT; i++)
    post_recv(v, (size_t)i * (GRH_LEN + MSG_SIZE), GRH_LEN + MSG_SIZE);
}

static void send_datagrams(struct verbs *v, struct ibv_ah *ah, uint32_t qpn) {
  size_t base = (size_t)MSG_COUNT * (GRH_LEN + MSG_SIZE);
  for (int i = 0; i < MSG_COUNT; i++) {
    fill_pattern(v->buf + base + (size_t)i * MSG_SIZE, MSG_SIZE, (unsigned)i);
    post_send(v, base + (size_t)i * MSG_SIZE, MSG_SIZE, ah, qpn);
  }
}

/* udaddy's client resolves A's UD QP with a SIDR_REQ, sends MSG_COUNT
 * datagrams (immediate data: its QPN) and waits for as many back. */
static int mode_sidr_server(void) {
  struct verbs v;
  verbs_open(&v, IBV_QPT_UD, 2 * MSG_COUNT * (GRH_LEN + MSG_SIZE));
  qp_ud_ready(&v);
  post_ud_recvs(&v);
  struct ib_cm_id *listener = listen_on(RDMA_PS_UDP);
  const struct cm_ev *req = wait_any(IB_CM_SIDR_REQ_RECEIVED);
  printf("SIDR_REQ: service ID 0x%016llx, P_Key 0x%04x\n",
         (unsigned long long)be64toh(req->id->service_id), req->param.sidr_req_rcvd.pkey);
  cma_hdr_check(req->pd);
  struct ib_cm_sidr_rep_param rep = {
      .qp_num = v.qp->qp_num, .qkey = RDMA_UDP_QKEY, .status = IB_SIDR_SUCCESS};
  CHECK_EQ(ib_send_cm_sidr_rep(req->id, &rep), 0);
  ib_destroy_cm_id(req->id);
  ib_destroy_cm_id(listener);
  struct ibv_wc wc = poll_until(&v, MSG_COUNT, 0);
  CHECK_EQ(wc.byte_len, GRH_LEN + MSG_SIZE);
  CHECK(wc.wc_flags & IBV_WC_WITH_IMM);
  uint32_t peer_qpn = be32toh(wc.imm_data);
  struct ibv_ah *ah = ibv_create_ah_from_wc(v.pd, &wc, (struct ibv_grh *)(v.buf + wc.wr_id), 1);
  CHECK(ah != NULL);
  send_datagrams(&v, ah, peer_qpn);
  poll_until(&v, 0, MSG_COUNT);
  printf("data: %d datagrams of %d bytes each way (peer UD QP 0x%06x)\n", MSG_COUNT, MSG_SIZE,
         peer_qpn);
  CHECK_EQ(ibv_destroy_ah(ah), 0);
  verbs_close(&v);
  return 0;
}

static int gid_index_of(struct verbs *v, const union ib_gid *gid) {
  for (int i = 0; i < 16; i++) {
    union ibv_gid g;
    if (ibv_query_gid(v->ctx, 1, i, &g) == 0 && memcmp(g.raw, gid->raw, 16) == 0)
      return i;
  }
  test_fail(__FILE__, __LINE__, "this side's GID is not in rxe's table");
}

/* A resolves udaddy's UD QP: SIDR_REQ with rdma_cm's header, SIDR_REP with
 * its QPN and rdma_cm's Q_Key, then MSG_COUNT datagrams each way. */
static int mode_sidr_client(void) {
  struct verbs v;
  verbs_open(&v, IBV_QPT_UD, 2 * MSG_COUNT * (GRH_LEN + MSG_SIZE));
  qp_ud_ready(&v);
  post_ud_recvs(&v);
  struct sa_path_rec path;
  uint8_t hdr[CMA_HDR_LEN];
  struct ib_cm_id *id = active_id(&path, hdr);
  struct ib_cm_sidr_req_param req = {
      .path = &path,
      .service_id = service_id(RDMA_PS_UDP),
      .timeout_ms = 2000,
      .private_data = hdr,
      .private_data_len = CMA_HDR_LEN,
      .max_cm_retries = 5,
  };
  long long t0 = now_ms();
  CHECK_EQ(ib_send_cm_sidr_req(id, &req), 0);
  const struct cm_ev *rep = wait_event_from(0, id, IB_CM_SIDR_REP_RECEIVED, WAIT_MS);
  const struct ib_cm_sidr_rep_event_param *p = &rep->param.sidr_rep_rcvd;
  printf("SIDR_REP after %lld ms: status %d, QPN 0x%06x, Q_Key 0x%08x\n", now_ms() - t0,
         (int)p->status, p->qpn, p->qkey);
  CHECK_EQ(p->status, IB_SIDR_SUCCESS);
  CHECK_EQ(p->qkey, RDMA_UDP_QKEY);
  ib_destroy_cm_id(id);
  struct ibv_ah_attr ah_attr = {
      .is_global = 1,
      .grh = {.hop_limit = path.hop_limit, .sgid_index = (uint8_t)gid_index_of(&v, &self_gid)},
      .port_num = 1,
  };
  memcpy(ah_attr.grh.dgid.raw, peer_gid.raw, 16);
  struct ibv_ah *ah = ibv_create_ah(v.pd, &ah_attr);
  CHECK(ah != NULL);
  send_datagrams(&v, ah, p->qpn);
  poll_until(&v, MSG_COUNT, MSG_COUNT);
  printf("data: %d datagrams of %d bytes each way\n", MSG_COUNT, MSG_SIZE);
  CHECK_EQ(ibv_destroy_ah(ah), 0);
  verbs_close(&v);
  return 0;
}

/* A tenant of ibcmd names QPs in REQs to the kernel in B, with short
 * timeouts: $IBCM_VICTIM_QPN (another user's connected QP: B's kernel would
 * find it in its remote QP table, REJ the REQ as a stale connection and DREQ
 * that connection, cm_match_req), QP1 (the kernel's), then an RC QP of its
 * own, in RESET, to a port nobody listens on. ibcmd must drop the first two
 * (each REQ then ends in REQ_ERROR, no REJ) and send the third (B's kernel
 * answers REJ "invalid service ID"). */
static int mode_spoof_req(void) {
  const char *victim = getenv("IBCM_VICTIM_QPN");
  if (!victim)
    test_fail(__FILE__, __LINE__, "$IBCM_VICTIM_QPN is not set");
  struct verbs v;
  verbs_open(&v, IBV_QPT_RC, 128);
  const struct {
    const char *whose;
    uint32_t qpn;
    int sent;
  } named[] = {{"another user's", (uint32_t)strtoul(victim, NULL, 0), 0},
               {"the kernel's (QP1)", 1, 0},
               {"its own", v.qp->qp_num, 1}};
  for (size_t i = 0; i < sizeof(named) / sizeof(named[0]); i++) {
    struct sa_path_rec path;
    uint8_t hdr[CMA_HDR_LEN];
    struct ib_cm_id *id = active_id(&path, hdr);
    uint16_t listening = tool_port;
    if (named[i].sent)
      tool_port++; /* nobody listens there */
    struct ib_cm_req_param req = rdma_cm_req(&path, hdr, RDMA_PS_TCP, named[i].qpn, IB_QPT_RC);
    tool_port = listening;
    req.remote_cm_response_timeout = 16; /* ~270 ms a try, 3 tries */
    req.local_cm_response_timeout = 16;
    req.max_cm_retries = 2;
    unsigned mark = log_mark();
    long long t0 = now_ms();
    CHECK_EQ(ib_send_cm_req(id, &req), 0);
    while (count_events_from(mark, id, IB_CM_REQ_ERROR) + count_events_from(mark, id, IB_CM_REJ_RECEIVED) == 0) {
      if (now_ms() - t0 > WAIT_MS)
        test_fail(__FILE__, __LINE__, "REQ naming %s QP 0x%06x: no answer in %d ms",
                  named[i].whose, named[i].qpn, WAIT_MS);
      sleep_ms(10);
    }
    if (count_events_from(mark, id, IB_CM_REJ_RECEIVED)) {
      const struct cm_ev *rej = wait_event_from(mark, id, IB_CM_REJ_RECEIVED, 0);
      int reason = rej->param.rej_rcvd.reason;
      printf("REQ naming %s QP 0x%06x: REJ reason %d after %lld ms\n", named[i].whose,
             named[i].qpn, reason, now_ms() - t0);
      if (!named[i].sent)
        test_fail(__FILE__, __LINE__,
                  "the REQ naming %s QP 0x%06x reached the kernel in B (REJ reason %d%s)",
                  named[i].whose, named[i].qpn, reason,
                  reason == IB_CM_REJ_STALE_CONN ? ": stale connection, it disconnects the QP's "
                                                   "connection"
                                                 : "");
      CHECK_EQ(reason, IB_CM_REJ_INVALID_SERVICE_ID);
    } else {
      printf("REQ naming %s QP 0x%06x: REQ_ERROR after %lld ms, nothing came back\n",
             named[i].whose, named[i].qpn, now_ms() - t0);
      if (named[i].sent)
        test_fail(__FILE__, __LINE__, "the REQ naming its own QP 0x%06x was not sent",
                  named[i].qpn);
    }
    ib_destroy_cm_id(id);
  }
  verbs_close(&v);
  return 0;
}

static struct ibcm_counters counters(void) {
  struct ibcm_counters c;
  CHECK_EQ(ibcm_get_counters(dev_a, 1, &c), 0);
  return c;
}

/* Connected to rdma_server; hook BLOCK makes B drop its own CM MADs, so the
 * kernel's DREQ never arrives and the kernel forgets the connection (hook
 * KERNEL_GONE waits for that and lifts the block). A's DREQ then finds nothing
 * in the kernel: its stateless DREP ends A's side all the same. */
static int mode_stale_dreq(void) {
  struct verbs v;
  verbs_open(&v, IBV_QPT_RC, 128);
  struct ib_cm_id *id = connect_to_kernel(&v, post_echo_recv);
  run_hook("BLOCK");
  echo_exchange(&v, 1);
  run_hook("KERNEL_GONE");
  CHECK_EQ(count_events(id, IB_CM_DREQ_RECEIVED), 0);
  CHECK_STATE(id, IB_CM_ESTABLISHED);
  disconnect_from_a(id);
  run_hook("CHECK");
  verbs_close(&v);
  return 0;
}

/* Connected to ucmatose's server (it sends MSG_COUNT messages at once); hook
 * BLOCK makes A drop its own CM MADs, A destroys its id (the DREQ is lost)
 * and waits until the library holds nothing; hook UNBLOCK; then the data
 * exchange on the QP that outlived the cm_id, after which the server
 * disconnects: the library answers its DREQ with a stateless DREP. */
static int mode_stale_drep(void) {
  struct verbs v;
  verbs_open(&v, IBV_QPT_RC, 2 * MSG_COUNT * MSG_SIZE);
  struct ib_cm_id *id = connect_to_kernel(&v, post_msg_recvs);
  run_hook("BLOCK");
  ib_destroy_cm_id(id);
  unsigned mark = log_mark();
  long long deadline = now_ms() + WAIT_MS;
  struct ibcm_stats st;
  do {
    CHECK(now_ms() < deadline);
    sleep_ms(50);
    CHECK_EQ(ibcm_get_stats(&st), 0);
  } while (st.cm_ids || st.timers);
  printf("A destroyed its cm_id; its DREQ was dropped; timewait over: 0 cm_ids, 0 timers\n");
  run_hook("UNBLOCK");
  struct ibcm_counters before = counters();
  for (int i = 0; i < MSG_COUNT; i++) {
    size_t off = (size_t)(MSG_COUNT + i) * MSG_SIZE;
    fill_pattern(v.buf + off, MSG_SIZE, (unsigned)i);
  }
  poll_until(&v, MSG_COUNT, 0);
  for (int i = 0; i < MSG_COUNT; i++)
    post_send(&v, (size_t)(MSG_COUNT + i) * MSG_SIZE, MSG_SIZE, NULL, 0);
  poll_until(&v, 0, MSG_COUNT);
  printf("data: %d messages of %d bytes each way on the QP that outlived its cm_id\n",
         MSG_COUNT, MSG_SIZE);
  struct ibcm_counters after;
  do {
    CHECK(now_ms() < deadline + WAIT_MS);
    sleep_ms(50);
    after = counters();
  } while (after.cm_tx_msgs[IBCM_CNT_DREP] == before.cm_tx_msgs[IBCM_CNT_DREP]);
  /* A stateless DREP is a "direct retry" to the kernel: booked as one
   * message plus one retry, in cm_tx_msgs (2) and cm_tx_retries (1). */
  printf("A's counters: DREQ received %llu -> %llu (duplicates %llu -> %llu), DREP "
         "cm_tx_retries %llu -> %llu, cm_tx_msgs %llu -> %llu\n",
         (unsigned long long)before.cm_rx_msgs[IBCM_CNT_DREQ],
         (unsigned long long)after.cm_rx_msgs[IBCM_CNT_DREQ],
         (unsigned long long)before.cm_rx_duplicates[IBCM_CNT_DREQ],
         (unsigned long long)after.cm_rx_duplicates[IBCM_CNT_DREQ],
         (unsigned long long)before.cm_tx_retries[IBCM_CNT_DREP],
         (unsigned long long)after.cm_tx_retries[IBCM_CNT_DREP],
         (unsigned long long)before.cm_tx_msgs[IBCM_CNT_DREP],
         (unsigned long long)after.cm_tx_msgs[IBCM_CNT_DREP]);
  CHECK(after.cm_rx_msgs[IBCM_CNT_DREQ] > before.cm_rx_msgs[IBCM_CNT_DREQ]);
  CHECK(after.cm_rx_duplicates[IBCM_CNT_DREQ] > before.cm_rx_duplicates[IBCM_CNT_DREQ]);
  CHECK(after.cm_tx_retries[IBCM_CNT_DREP] > before.cm_tx_retries[IBCM_CNT_DREP]);
  CHECK_EQ(log_mark(), mark); /* no event for a destroyed id */
  run_hook("CHECK");
  verbs_close(&v);
  return 0;
}

/* ---- XRC: the CM messages only ------------------------------------------- */

#define XRC_CONNS 2
#define XRC_A_INI_QPN 0x00a1c0u /* A's XRC_INI QPNs: this, this + 1 */
#define XRC_A_TGT_QPN 0x00a7c0u /* A's XRC_TGT QPN (the scenario tells B) */

/* Says whether the device has XRC verbs objects; rxe has none. */
static void xrc_verbs_probe(void) {
  struct ibv_context *ctx = verbs_open_device();
  struct ibv_xrcd_init_attr attr = {
      .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1, .oflags = O_CREAT};
  struct ibv_xrcd *xrcd = ibv_open_xrcd(ctx, &attr);
  if (xrcd) {
    printf("verbs: %s opens an XRC domain; this mode still exchanges the CM messages only\n",
           dev_a_name());
    CHECK_EQ(ibv_close_xrcd(xrcd), 0);
  } else {
    printf("verbs: %s has no XRC (ibv_open_xrcd: %s): the CM messages only, QPNs not "
           "backed by QPs, no data\n",
           dev_a_name(), strerror(errno));
  }
  CHECK_EQ(ibv_close_device(ctx), 0);
}

/* The 32-bit big-endian QPN a peer put in its private data. */
static uint32_t pd_qpn(const struct cm_ev *e) {
  uint32_t be;
  memcpy(&be, e->pd, sizeof(be));
  return be32toh(be);
}

/* A's XRC_INI connections to the kernel's XRC_TGT (xrc-peer server): each REP
 * carries the target's QPN in its EECN (and, like rdma_xserver's SRQ number,
 * in its private data); two to the same node are two connections, not a
 * stale one; RTR aims at the target QP; A's DREQs reach the kernel. */
static int mode_xrc_client(void) {
  xrc_verbs_probe();
  struct ib_cm_id *ids[XRC_CONNS];
  for (int i = 0; i < XRC_CONNS; i++) {
    struct sa_path_rec path;
    uint8_t hdr[CMA_HDR_LEN];
    struct ib_cm_id *id = active_id(&path, hdr);
    struct ib_cm_req_param req =
        rdma_cm_req(&path, hdr, RDMA_PS_IB, XRC_A_INI_QPN + (uint32_t)i, IB_QPT_XRC_INI);
    CHECK_EQ(ib_send_cm_req(id, &req), 0);
    const struct cm_ev *rep = wait_event_from(0, id, IB_CM_REP_RECEIVED, WAIT_MS);
    uint32_t tgt = pd_qpn(rep);
    printf("REP %d: remote QPN 0x%06x, the kernel's XRC_TGT QPN (its private data) 0x%06x, "
           "SRQ %u\n",
           i + 1, rep->param.rep_rcvd.remote_qpn, tgt, rep->param.rep_rcvd.srq);
    CHECK_EQ(rep->param.rep_rcvd.remote_qpn, tgt);
    CHECK(tgt != 0);
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_RTR};
    int mask = 0;
    CHECK_EQ(ib_cm_init_qp_attr(id, &attr, &mask), 0);
    CHECK(mask & IBV_QP_DEST_QPN);
    CHECK_EQ(attr.dest_qp_num, tgt);
    CHECK_EQ(ib_send_cm_rtu(id, NULL, 0), 0);
    CHECK_STATE(id, IB_CM_ESTABLISHED);
    ids[i] = id;
  }
  printf("%d XRC connections established to one node\n", XRC_CONNS);
  for (int i = 0; i < XRC_CONNS; i++)
    disconnect_from_a(ids[i]);
  return 0;
}

/* The kernel's XRC_INI (xrc-peer client) connects to A's XRC_TGT: A's REP
 * carries its QPN in the EECN, which the kernel must read (xrc-peer checks
 * it), and the kernel's DREQ then carries it back to A. */
static int mode_xrc_server(void) {
  xrc_verbs_probe();
  struct ib_cm_id *listener = listen_on(RDMA_PS_IB);
  const struct cm_ev *req = wait_any(IB_CM_REQ_RECEIVED);
  struct ib_cm_id *id = req->id;
  const struct ib_cm_req_event_param *p = &req->param.req_rcvd;
  printf("REQ: service ID 0x%016llx, remote QPN 0x%06x, %s\n",
         (unsigned long long)be64toh(id->service_id), p->remote_qpn,
         p->qp_type == IB_QPT_XRC_TGT ? "XRC_TGT" : "not XRC_TGT");
  CHECK(p->qp_type == IB_QPT_XRC_TGT);
  cma_hdr_check(req->pd);
  uint32_t be = htobe32(XRC_A_TGT_QPN);
  struct ib_cm_rep_param rep = {
      .qp_num = XRC_A_TGT_QPN,
      .starting_psn = random_psn(),
      .private_data = &be,
      .private_data_len = sizeof(be),
      .rnr_retry_count = 7,
      .srq = 1,
  };
  CHECK_EQ(ib_send_cm_rep(id, &rep), 0);
  /* No state check here: the kernel's DREQ follows its RTU at once (the id
   * may be DREQ_RCVD already); DREQ_RECEIVED below proves both. */
  wait_event_from(0, id, IB_CM_RTU_RECEIVED, WAIT_MS);
  printf("XRC connection established (A is XRC_TGT QPN 0x%06x)\n", XRC_A_TGT_QPN);
  ib_destroy_cm_id(listener);
  disconnect_from_kernel(id);
  return 0;
}

int main(int argc, char **argv) {
  static const struct {
    const char *name;
    int (*run)(void);
  } modes[] = {
      {"rping-client", mode_rping_client}, {"echo-client", mode_echo_client},
      {"echo-server", mode_echo_server},   {"msg-server", mode_msg_server},
      {"sidr-server", mode_sidr_server},   {"sidr-client", mode_sidr_client},
      {"stale-dreq", mode_stale_dreq},     {"stale-drep", mode_stale_drep},
      {"xrc-client", mode_xrc_client},     {"xrc-server", mode_xrc_server},
      {"spoof-req", mode_spoof_req},
  };
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODE PORT (see the comment at the top of ibcm-interop.c)\n",
            argv[0]);
    return 2;
  }
  tool_port = (uint16_t)atoi(argv[2]);
  self_ip = env_ip("SRT_SELF_IP");
  peer_ip = env_ip("SRT_PEER_IP");
  gid_from_ipv4(&self_gid, self_ip);
  gid_from_ipv4(&peer_gid, peer_ip);
  for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
    if (strcmp(argv[1], modes[i].name) != 0)
      continue;
    test_init_one();
    int rc = modes[i].run();
    test_finish();
    if (rc == 0)
      printf("ibcm-interop %s: OK\n", argv[1]);
    return rc;
  }
  fprintf(stderr, "%s: unknown mode %s\n", argv[0], argv[1]);
  return 2;
}
