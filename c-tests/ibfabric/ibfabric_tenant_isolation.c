/*
 * The honest CM processes of the tenant-isolation scenarios (issue 30;
 * c-tests/ibfabric/tenant_isolation.sh runs them through ibcmd, the
 * misbehaving ones are misbehaving_tenant.py). IBFABRIC_SERVICE (hex) is the
 * service ID.
 *
 *   ibfabric_tenant_isolation hijack-server DIR
 *       T1, behind host A's ibcmd: listens; holds the first 3 REQs
 *       unanswered, writes their senders' comm IDs to DIR/reqs ("comm-ID
 *       QPN" a line, in arrival order) and answers them with REPs once
 *       DIR/answer exists; then the 4th REQ gets an MRA and a REJ (reason 28)
 *       of T1's own.
 *   ibfabric_tenant_isolation hijack-client GUID
 *       B, on another HCA: 3 REQs to the port GUID; each must end
 *       ESTABLISHED with T1's QPN, with no MRA, no REJ and no other REP seen,
 *       and is disconnected (DREQ/DREP private data checked); then a 4th REQ
 *       must get T1's MRA, then T1's REJ. Every connection's outcome is
 *       printed before the verdict.
 *   ibfabric_tenant_isolation soak-server N
 *       host B: answers REQs, checks the private data of N DREQs and ends
 *       once their timewaits are over.
 *   ibfabric_tenant_isolation soak-client GUID N PAUSE_MS
 *       the honest tenant: N connections to the port GUID one after the
 *       other (REP and DREP private data checked), PAUSE_MS apart.
 *
 * Private data is checked up to what umad2sim delivers (ibfabric_peer.c:
 * bytes 224..255 of every MAD arrive as zeros).
 */
#include "common.h"

#include <unistd.h>

#define MAD_DELIVERED 224
#define REP_PD_AT 60
#define DREQ_PD_AT 36
#define DREP_PD_AT 32
#define MRA_PD_AT 34
#define REJ_PD_AT 108
#define DREQ_PD_SEED 0x44
#define DREP_PD_SEED 0x55
#define MRA_PD_SEED 0x99
#define REJ_PD_SEED 0xaa
#define HELD_REQS 3 /* the REQs T1 holds while the attacker answers them */
#define MRA_SERVICE_TIMEOUT 20

static uint64_t service_id(void) {
  const char *s = getenv("IBFABRIC_SERVICE");
  return s ? strtoull(s, NULL, 16) : SERVICE_ID;
}

/* Whether `len` bytes of private data at MAD offset `at` arrived as sent
 * (as far as umad2sim delivers). */
static int pd_as_sent(const struct cm_ev *e, size_t at, size_t len, unsigned seed) {
  size_t n = at + len <= MAD_DELIVERED ? len : MAD_DELIVERED - at;
  return e->pd_len >= n && check_pattern(e->pd, n, seed);
}

static void check_pd(const struct cm_ev *e, size_t at, size_t len, unsigned seed) {
  CHECK(pd_as_sent(e, at, len, seed));
}

/* The GID of port `guid` in the default subnet. */
static union ib_gid gid_of_port(const char *guid) {
  union ib_gid gid = {.raw = {0xfe, 0x80}};
  uint64_t be = htobe64(strtoull(guid, NULL, 0));
  memcpy(&gid.raw[8], &be, 8);
  return gid;
}

static void path_to_port(const char *guid, struct sa_path_rec *path) {
  union ib_gid gid = gid_of_port(guid);
  CHECK_EQ(ibcm_init_path(dev_a, 1, &gid, path), 0);
  CHECK(path->ib.dlid != 0);
}

static void set_drep_pattern(void) {
  uint8_t pd[IB_CM_DREP_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), DREP_PD_SEED);
  set_drep_data(pd, sizeof(pd));
}

static int file_exists(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

/* Creates DIR/NAME. */
static void touch(const char *dir, const char *name) {
  char path[512];
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  CHECK_EQ(fclose(f), 0);
}

/* The first event of `id` among `types` (n of them), polled until
 * `until_ms`; NULL when none came. */
static const struct cm_ev *first_of(struct ib_cm_id *id, const enum ib_cm_event_type *types,
                                    int n, long long until_ms) {
  for (;;) {
    const struct cm_ev *found = NULL;
    for (int i = 0; i < n; i++) {
      if (count_events(id, types[i]) == 0)
        continue;
      const struct cm_ev *e = wait_event_from(0, id, types[i], 0);
      if (!found || e->seq < found->seq)
        found = e;
    }
    if (found || now_ms() > until_ms)
      return found;
    sleep_ms(20);
  }
}

/* A REQ to `path`'s port that survives T1 holding it for a while (4 s
 * response timeout, 15 retries). */
static struct ib_cm_id *slow_req(struct sa_path_rec *path, uint32_t qpn) {
  struct conn_opts o;
  conn_opts_default(&o);
  o.service_id = service_id();
  o.remote_cm_response_timeout = o.local_cm_response_timeout = 20;
  o.max_cm_retries = 15;
  struct ib_cm_req_param req;
  req_param_init(&req, path, &o, qpn);
  struct ib_cm_id *id = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_send_cm_req(id, &req), 0);
  return id;
}

static void disconnect_actively(struct ib_cm_id *id) {
  uint8_t pd[IB_CM_DREQ_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), DREQ_PD_SEED);
  CHECK_EQ(ib_send_cm_dreq(id, pd, sizeof(pd)), 0);
  check_pd(wait_event_from(0, id, IB_CM_DREP_RECEIVED, 20000), DREP_PD_AT,
           IB_CM_DREP_PRIVATE_DATA_SIZE, DREP_PD_SEED);
  wait_event_from(0, id, IB_CM_TIMEWAIT_EXIT, 20000);
}

/* ---- switch-hijack ------------------------------------------------------ */

static int hijack_server(const char *dir) {
  atomic_store(&reply_req, 0); /* held: answered below */
  set_drep_pattern();
  struct ib_cm_id *listener = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_cm_listen(listener, htobe64(service_id())), 0);
  touch(dir, "listening");

  wait_count(IB_CM_REQ_RECEIVED, HELD_REQS, 30000);
  const struct cm_ev *reqs[HELD_REQS];
  char name[512], tmp[520];
  snprintf(name, sizeof(name), "%s/reqs", dir);
  snprintf(tmp, sizeof(tmp), "%s.tmp", name);
  FILE *f = fopen(tmp, "w");
  CHECK(f != NULL);
  for (unsigned i = 0, since = 0; i < HELD_REQS; i++) {
    reqs[i] = wait_event_from(since, NULL, IB_CM_REQ_RECEIVED, 0);
    since = reqs[i]->seq + 1;
    uint32_t qpn = reqs[i]->param.req_rcvd.remote_qpn;
    fprintf(f, "%#010x %#x\n", be32toh(reqs[i]->remote_id), qpn);
    printf("REQ %u held: from comm ID %#010x, QPN %#x (T1 answers with QPN %#x)\n", i,
           be32toh(reqs[i]->remote_id), qpn, rep_qpn(qpn));
  }
  CHECK_EQ(fclose(f), 0);
  CHECK_EQ(rename(tmp, name), 0);

  for (long long until = now_ms() + 60000; !file_exists(dir, "answer"); sleep_ms(20))
    if (now_ms() > until)
      test_fail(__FILE__, __LINE__, "no %s/answer after 60 s", dir);
  for (int i = 0; i < HELD_REQS; i++)
    CHECK_EQ(answer_req(reqs[i]->id, reqs[i]->param.req_rcvd.remote_qpn), 0);
  printf("answered the %d REQs with REPs\n", HELD_REQS);

  int failed = 0;
  long long until = now_ms() + 20000;
  for (int i = 0; i < HELD_REQS; i++) {
    struct ib_cm_id *id = reqs[i]->id;
    const enum ib_cm_event_type ends[] = {IB_CM_RTU_RECEIVED, IB_CM_REJ_RECEIVED,
                                          IB_CM_REP_ERROR};
    const struct cm_ev *e = first_of(id, ends, 3, until);
    if (!e || e->type != IB_CM_RTU_RECEIVED) {
      printf("REQ %d: %s instead of the RTU\n", i, e ? event_name(e->type) : "nothing in 20 s");
      failed = 1;
      continue;
    }
    check_pd(wait_event_from(0, id, IB_CM_DREQ_RECEIVED, 20000), DREQ_PD_AT,
             IB_CM_DREQ_PRIVATE_DATA_SIZE, DREQ_PD_SEED);
    wait_event_from(0, id, IB_CM_TIMEWAIT_EXIT, 20000);
    printf("REQ %d: RTU, then B's DREQ (private data as sent), DREP, timewait over\n", i);
  }

  /* Both ways: T1's own MRA and REJ of the REQ routed to it. */
  const struct cm_ev *req = wait_event_from(reqs[HELD_REQS - 1]->seq + 1, NULL,
                                            IB_CM_REQ_RECEIVED, 60000);
  uint8_t mra_pd[IB_CM_MRA_PRIVATE_DATA_SIZE], rej_pd[IB_CM_REJ_PRIVATE_DATA_SIZE];
  fill_pattern(mra_pd, sizeof(mra_pd), MRA_PD_SEED);
  fill_pattern(rej_pd, sizeof(rej_pd), REJ_PD_SEED);
  CHECK_EQ(ib_send_cm_mra(req->id, MRA_SERVICE_TIMEOUT, mra_pd, sizeof(mra_pd)), 0);
  CHECK_EQ(ib_send_cm_rej(req->id, IB_CM_REJ_CONSUMER_DEFINED, NULL, 0, rej_pd, sizeof(rej_pd)),
           0);
  printf("REQ %d: T1 sent its MRA, then its REJ (reason 28)\n", HELD_REQS);

  for (unsigned since = 0, n = count_events(NULL, IB_CM_REQ_RECEIVED); n-- > 0;) {
    const struct cm_ev *e = wait_event_from(since, NULL, IB_CM_REQ_RECEIVED, 0);
    ib_destroy_cm_id(e->id);
    since = e->seq + 1;
  }
  ib_destroy_cm_id(listener);
  return failed;
}

/* Prints how B's connection `i` ended; 1 unless it is established with T1
 * (its REP's QPN is T1's for QPN `qpn`) without any MRA or REJ. */
static int hijack_outcome(int i, struct ib_cm_id *id, uint32_t qpn) {
  const enum ib_cm_event_type ends[] = {IB_CM_REP_RECEIVED, IB_CM_REJ_RECEIVED, IB_CM_REQ_ERROR};
  const struct cm_ev *e = first_of(id, ends, 3, now_ms() + 60000);
  int bad = 0;
  if (count_events(id, IB_CM_MRA_RECEIVED)) {
    const struct cm_ev *mra = wait_event_from(0, id, IB_CM_MRA_RECEIVED, 0);
    printf("connection %d: MRA_RECEIVED (service timeout %u, private data \"%.20s\"): not T1's\n",
           i, mra->param.mra_rcvd.service_timeout, (const char *)mra->pd);
    bad = 1;
  }
  if (!e) {
    printf("connection %d: no REP, REJ or REQ_ERROR in 60 s\n", i);
    return 1;
  }
  switch (e->type) {
  case IB_CM_REJ_RECEIVED:
    printf("connection %d: REJ_RECEIVED, reason %d, private data \"%.20s\": not T1's\n", i,
           e->param.rej_rcvd.reason, (const char *)e->pd);
    return 1;
  case IB_CM_REQ_ERROR:
    printf("connection %d: REQ_ERROR\n", i);
    return 1;
  default:
    break;
  }
  uint32_t remote_qpn = e->param.rep_rcvd.remote_qpn;
  if (remote_qpn != rep_qpn(qpn)) {
    printf("connection %d: REP_RECEIVED from QPN %#x (T1's is %#x, private data \"%.20s\"), "
           "state %s: not T1's\n",
           i, remote_qpn, rep_qpn(qpn), (const char *)e->pd, state_name(id->state));
    return 1;
  }
  check_pd(e, REP_PD_AT, IB_CM_REP_PRIVATE_DATA_SIZE, REP_PD_SEED);
  CHECK_STATE(id, IB_CM_ESTABLISHED);
  disconnect_actively(id);
  CHECK_EQ(count_events(id, IB_CM_REJ_RECEIVED) + count_events(id, IB_CM_REP_RECEIVED), 1);
  printf("connection %d: ESTABLISHED with T1's QPN %#x, DREQ/DREP private data as sent%s\n", i,
         remote_qpn, bad ? "" : ", no MRA or REJ seen");
  return bad;
}

static int hijack_client(const char *guid) {
  set_drep_pattern();
  struct sa_path_rec path;
  path_to_port(guid, &path);
  struct ib_cm_id *ids[HELD_REQS];
  uint32_t qpns[HELD_REQS];
  for (int i = 0; i < HELD_REQS; i++) {
    qpns[i] = next_qpn();
    ids[i] = slow_req(&path, qpns[i]);
    printf("connection %d: REQ from comm ID %#010x, QPN %#x\n", i, be32toh(ids[i]->local_id),
           qpns[i]);
  }
  int failed = 0;
  for (int i = 0; i < HELD_REQS; i++)
    failed |= hijack_outcome(i, ids[i], qpns[i]);

  /* Both ways: T1's MRA then T1's REJ reach B. */
  uint32_t qpn = next_qpn();
  struct ib_cm_id *id = slow_req(&path, qpn);
  const struct cm_ev *rej = wait_event_from(0, id, IB_CM_REJ_RECEIVED, 30000);
  const struct cm_ev *mra = wait_event_from(0, id, IB_CM_MRA_RECEIVED, 0);
  CHECK(mra->seq < rej->seq);
  CHECK_EQ(mra->param.mra_rcvd.service_timeout, MRA_SERVICE_TIMEOUT);
  check_pd(mra, MRA_PD_AT, IB_CM_MRA_PRIVATE_DATA_SIZE, MRA_PD_SEED);
  CHECK_EQ(rej->param.rej_rcvd.reason, IB_CM_REJ_CONSUMER_DEFINED);
  check_pd(rej, REJ_PD_AT, IB_CM_REJ_PRIVATE_DATA_SIZE, REJ_PD_SEED);
  CHECK_STATE(id, IB_CM_IDLE);
  printf("connection %d: T1's MRA (service timeout %d), then T1's REJ (reason 28), private data "
         "as sent\n",
         HELD_REQS, MRA_SERVICE_TIMEOUT);
  ib_destroy_cm_id(id);
  for (int i = 0; i < HELD_REQS; i++)
    ib_destroy_cm_id(ids[i]);
  return failed;
}

/* ---- switch-misbehaving-tenants-soak ------------------------------------ */

static int soak_server(int n) {
  set_drep_pattern();
  struct ib_cm_id *listener = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_cm_listen(listener, htobe64(service_id())), 0);
  printf("listening\n");
  for (unsigned since = 0, i = 0; i < (unsigned)n; i++) {
    const struct cm_ev *dreq = wait_event_from(since, NULL, IB_CM_DREQ_RECEIVED, 120000);
    check_pd(dreq, DREQ_PD_AT, IB_CM_DREQ_PRIVATE_DATA_SIZE, DREQ_PD_SEED);
    since = dreq->seq + 1;
  }
  wait_count(IB_CM_TIMEWAIT_EXIT, (unsigned)n, 60000);
  unsigned reqs = count_events(NULL, IB_CM_REQ_RECEIVED);
  for (unsigned since = 0, left = reqs; left-- > 0;) {
    const struct cm_ev *e = wait_event_from(since, NULL, IB_CM_REQ_RECEIVED, 0);
    ib_destroy_cm_id(e->id);
    since = e->seq + 1;
  }
  ib_destroy_cm_id(listener);
  printf("%d connections: REQ, REP, RTU, DREQ (private data as sent), DREP; %u REQs received\n",
         n, reqs);
  return 0;
}

static int soak_client(const char *guid, int n, int pause_ms) {
  set_drep_pattern();
  struct sa_path_rec path;
  path_to_port(guid, &path);
  struct ib_cm_id **ids = calloc((size_t)n, sizeof(*ids));
  CHECK(ids != NULL);
  long long slowest_up = 0, slowest_down = 0, t0 = now_ms();
  struct conn_opts o;
  conn_opts_default(&o);
  o.service_id = service_id();
  o.remote_cm_response_timeout = o.local_cm_response_timeout = 18; /* 1 s */
  o.max_cm_retries = 15;
  for (int i = 0; i < n; i++) {
    uint32_t qpn = next_qpn();
    struct ib_cm_req_param req;
    req_param_init(&req, &path, &o, qpn);
    ids[i] = create_id(dev_a, test_handler, NULL);
    long long t = now_ms();
    CHECK_EQ(ib_send_cm_req(ids[i], &req), 0);
    const struct cm_ev *rep = wait_event_from(0, ids[i], IB_CM_REP_RECEIVED, 30000);
    CHECK_EQ(rep->param.rep_rcvd.remote_qpn, rep_qpn(qpn));
    check_pd(rep, REP_PD_AT, IB_CM_REP_PRIVATE_DATA_SIZE, REP_PD_SEED);
    CHECK_STATE(ids[i], IB_CM_ESTABLISHED);
    long long up = now_ms();
    uint8_t pd[IB_CM_DREQ_PRIVATE_DATA_SIZE];
    fill_pattern(pd, sizeof(pd), DREQ_PD_SEED);
    CHECK_EQ(ib_send_cm_dreq(ids[i], pd, sizeof(pd)), 0);
    check_pd(wait_event_from(0, ids[i], IB_CM_DREP_RECEIVED, 30000), DREP_PD_AT,
             IB_CM_DREP_PRIVATE_DATA_SIZE, DREP_PD_SEED);
    long long down = now_ms();
    slowest_up = up - t > slowest_up ? up - t : slowest_up;
    slowest_down = down - up > slowest_down ? down - up : slowest_down;
    sleep_ms(pause_ms);
  }
  for (int i = 0; i < n; i++) {
    wait_event_from(0, ids[i], IB_CM_TIMEWAIT_EXIT, 30000);
    ib_destroy_cm_id(ids[i]);
  }
  free(ids);
  CHECK_EQ(count_events(NULL, IB_CM_REJ_RECEIVED) + count_events(NULL, IB_CM_REQ_ERROR) +
               count_events(NULL, IB_CM_DREQ_ERROR),
           0);
  printf("%d connections up and down in %lld ms (slowest up %lld ms, slowest down %lld ms), "
         "REP and DREP private data as sent\n",
         n, now_ms() - t0, slowest_up, slowest_down);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3 || !getenv("IBCM_SWITCH_SOCKET"))
    return 2; /* through ibcmd only */
  test_init_one();
  int rc = 2;
  if (!strcmp(argv[1], "hijack-server"))
    rc = hijack_server(argv[2]);
  else if (!strcmp(argv[1], "hijack-client"))
    rc = hijack_client(argv[2]);
  else if (!strcmp(argv[1], "soak-server"))
    rc = soak_server(atoi(argv[2]));
  else if (!strcmp(argv[1], "soak-client") && argc > 4)
    rc = soak_client(argv[2], atoi(argv[3]), atoi(argv[4]));
  test_finish();
  return rc;
}
