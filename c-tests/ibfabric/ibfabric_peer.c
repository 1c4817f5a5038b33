/*
 * One CM process on an HCA of the simulated InfiniBand fabric (ibsim +
 * OpenSM, c-tests/ibfabric/run.sh starts them and this program under
 * libumad2sim.so with SIM_HOST naming the HCA).
 *
 *   ibfabric_peer path GUID             prints the path ibcm_init_path finds
 *                                       to port GUID (as saquery prints it)
 *   ibfabric_peer server DIR a|b        listens; writes DIR/server.gid once
 *                                       ready; a: the client disconnects,
 *                                       b: this side does, k: once
 *                                       established, writes DIR/server.pid
 *                                       and waits to be killed
 *   ibfabric_peer client DIR a|b        connects to DIR/server.gid's port
 *   ibfabric_peer patherr GUID ERRNO    ibcm_init_path to GUID fails with -ERRNO
 *   ibfabric_peer sa-rate GUID COUNT    COUNT ibcm_init_path to GUID in a row:
 *                                       the time each took (cache off)
 *   ibfabric_peer sidr-server DIR       answers a SIDR REQ (writes DIR/server.gid)
 *   ibfabric_peer sidr-client DIR       a SIDR REQ to it
 *   ibfabric_peer mesh DIR N I ROUNDS [lossy]
 *                                       process I of N (all-to-all): ROUNDS
 *                                       connections to each of I+1..N-1,
 *                                       each disconnected with DREQ/DREP;
 *                                       writes DIR/ready.I once its paths are
 *                                       resolved and starts on DIR/go; all N
 *                                       are up before any disconnects;
 *                                       lossy: packet drops are on.
 *                                       IBFABRIC_MESH_LANES=P: P processes a
 *                                       host (I = host * P + lane), each
 *                                       connecting only to its lane on the
 *                                       other hosts (P all-to-alls of the
 *                                       hosts, an MPI job's ranks);
 *                                       IBFABRIC_PATH_PER_CONNECTION=1: an
 *                                       ibcm_init_path before each REQ (as
 *                                       rdma_cm resolves a route per
 *                                       connection), timed with the mesh,
 *                                       instead of once per peer before it
 *   ibfabric_peer mesh-slow DIR N I ROUNDS DELAY
 *                                       as mesh, but every process answers
 *                                       the REQs it gets one at a time,
 *                                       DELAY ms apart (a passive side that
 *                                       falls behind, issue 33); prints how
 *                                       many connections were made and how
 *                                       many failed, exit 1 if any failed
 *   ibfabric_peer lap-server DIR        a connection that receives a LAP
 *   ibfabric_peer lap-client DIR SLID DLID   connects, then sends a LAP with
 *                                       the alternate path SLID -> DLID
 *   ibfabric_peer idle DIR              opens the device, listens on nothing
 *   ibfabric_peer rej DIR               a REQ to the idle peer: REJ
 *   ibfabric_peer sa-async GUID         prints the path ib_sa_path_rec_get's
 *                                       callback gets to port GUID
 *   ibfabric_peer sa-cancel GUID        with the SM stopped: a query
 *                                       cancelled gets -EINTR once, one left
 *                                       alone -ETIMEDOUT
 *
 * Through ibcmd (IBCM_SWITCH_SOCKET set): no harness steps (the daemon's
 * process took them); IBFABRIC_SERVICE (hex) is the service ID instead of
 * SERVICE_ID (mesh: plus I, one per process); client K: the dead peer's
 * DREQ gets the daemon's stateless DREP; client w: waits for DIR/killed
 * before its DREQ (a connection that outlives another process's death).
 *
 * Private data is checked byte for byte up to what umad2sim delivers: it
 * hands a MAD over in a 288-byte buffer with a 64-byte header, so bytes
 * 224..255 of every MAD arrive as zeros (DREQ private data from 188, DREP's
 * from 192, REQ's from 60, REP's from 164).
 */
#include "common.h"

#include <rdma/ib_sa.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#define DREQ_PD_SEED 0x44
#define DREP_PD_SEED 0x55
#define MAD_DELIVERED 224 /* umad2sim's limit */
#define DREQ_PD_AT 36     /* where the private data starts in each MAD */
#define DREP_PD_AT 32
#define REQ_PD_AT 164
#define REP_PD_AT 60
#define SIDR_REQ_PD_AT 40
#define SIDR_REP_PD_AT 120
#define SIDR_REQ_PD_SEED 0x66
#define SIDR_REP_PD_SEED 0x77
#define SIDR_QPN 0x123456u
#define SIDR_QKEY 0x11111111u

/* The service ID of this run: IBFABRIC_SERVICE, or SERVICE_ID. */
static uint64_t service_id(void) {
  const char *s = getenv("IBFABRIC_SERVICE");
  return s ? strtoull(s, NULL, 16) : SERVICE_ID;
}

static size_t delivered(size_t at, size_t len) {
  return at + len <= MAD_DELIVERED ? len : MAD_DELIVERED - at;
}

/* What a test process on ibsim must do, never the library: take the port's
 * SM capability (ibsim hands unsolicited QP1 requests only to an SM-capable
 * client) and register a never-read agent for the SMP classes, which OpenSM
 * then sends here (umad2sim crashes on a MAD of a class nobody registered). */
static int harness_fd = -1, harness_qp1_agent = -1;
static int (*harness_send)(int, int, void *, int, int, int);

static void ibsim_harness_steps(void) {
  void *umad = dlopen("libibumad.so.3", RTLD_NOW);
  CHECK(umad != NULL);
  int (*open_port)(const char *, int) = (int (*)(const char *, int))dlsym(umad, "umad_open_port");
  int (*reg)(int, int, int, uint8_t, long *) =
      (int (*)(int, int, int, uint8_t, long *))dlsym(umad, "umad_register");
  harness_send = (int (*)(int, int, void *, int, int, int))dlsym(umad, "umad_send");
  CHECK(open_port && reg && harness_send);
  int fd = open_port("ibsim0", 1);
  CHECK(fd >= 0);
  long mask[2] = {0, 0};
  CHECK(reg(fd, 0x81, 1, 0, mask) >= 0);
  CHECK(reg(fd, 0x01, 1, 0, mask) >= 0);
  /* A QP1 agent (Performance class, no methods: it never receives) for the
   * `lap` scenario's LAP, which no kernel API sends any more. */
  harness_fd = fd;
  harness_qp1_agent = reg(fd, 0x04, 1, 0, mask);
  CHECK(harness_qp1_agent >= 0);
  /* Only now: OpenSM queries an SM-capable port at once. */
  if (open("/dev/infiniband/issm0", O_RDWR) < 0)
    test_fail(__FILE__, __LINE__, "open issm0 (is libumad2sim.so preloaded?)");
}

static void path_file(char *out, size_t n, const char *dir) {
  snprintf(out, n, "%s/server.gid", dir);
}

static void write_gid(const char *dir) {
  char name[512], tmp[520];
  path_file(name, sizeof(name), dir);
  snprintf(tmp, sizeof(tmp), "%s.tmp", name);
  FILE *f = fopen(tmp, "w");
  CHECK(f != NULL);
  for (int i = 0; i < 16; i++)
    fprintf(f, "%02x", gid_a.raw[i]);
  fprintf(f, "\n");
  CHECK_EQ(fclose(f), 0);
  CHECK_EQ(rename(tmp, name), 0);
}

static union ib_gid read_gid(const char *dir) {
  char name[512];
  path_file(name, sizeof(name), dir);
  union ib_gid gid;
  long long until = now_ms() + 20000;
  for (;;) {
    FILE *f = fopen(name, "r");
    if (f) {
      for (int i = 0; i < 16; i++) {
        unsigned b;
        CHECK_EQ(fscanf(f, "%2x", &b), 1);
        gid.raw[i] = (uint8_t)b;
      }
      fclose(f);
      return gid;
    }
    if (now_ms() > until)
      test_fail(__FILE__, __LINE__, "no %s after 20 s", name);
    sleep_ms(50);
  }
}

static void print_path(const struct sa_path_rec *p) {
  uint32_t fl = be32toh(p->flow_label);
  printf("dlid %u\nslid %u\nsl 0x%x\nmtu 0x%x\nrate 0x%x\npkt_life 0x%x\npkey 0x%04X\n"
         "hop_flow_raw 0x%x\ntclass 0x%x\nnum_path_revers 0x%x\n",
         be16toh(p->ib.dlid), be16toh(p->ib.slid), p->sl,
         (unsigned)(p->mtu_selector << 6 | p->mtu), (unsigned)(p->rate_selector << 6 | p->rate),
         (unsigned)(p->packet_life_time_selector << 6 | p->packet_life_time), be16toh(p->pkey),
         (unsigned)(fl << 8 | p->hop_limit), p->traffic_class,
         (unsigned)(p->reversible << 7 | p->numb_path));
}

/* The path this process's port has to the port of `gid`: an IB path from
 * the SA, LID-routed inside the subnet (no GRH). */
/* How often a path query ran out of its 2 s (-ETIMEDOUT) and was asked
 * again, as an application asks again after rdma_cm's ROUTE_ERROR: with
 * packet drops on the way to the SM, 4 tries can all be lost. */
static unsigned path_timeouts;

static void path_to(const union ib_gid *gid, struct sa_path_rec *path) {
  int rc;
  for (int tries = 0; (rc = ibcm_init_path(dev_a, 1, gid, path)) == -ETIMEDOUT && tries < 5;
       tries++)
    path_timeouts++;
  CHECK_EQ(rc, 0);
  if (getenv("IBFABRIC_ROCE")) /* the mesh on SoftRoCE (switch_softroce.sh) */
    return;
  CHECK_EQ(path->rec_type, SA_PATH_REC_TYPE_IB);
  CHECK(path->ib.dlid != 0 && path->ib.slid != 0);
  CHECK_EQ(path->hop_limit, 0);
}

static void check_pd(const struct cm_ev *e, size_t at, size_t len, unsigned seed) {
  size_t n = delivered(at, len);
  CHECK(e->pd_len >= n);
  CHECK(check_pattern(e->pd, n, seed));
  printf("%s: private data bytes 0..%zu as sent\n", event_name(e->type), n - 1);
}

static void disconnect_actively(struct ib_cm_id *id) {
  uint8_t pd[IB_CM_DREQ_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), DREQ_PD_SEED);
  CHECK_EQ(ib_send_cm_dreq(id, pd, sizeof(pd)), 0);
  const struct cm_ev *drep = wait_event_from(0, id, IB_CM_DREP_RECEIVED, 20000);
  check_pd(drep, DREP_PD_AT, IB_CM_DREP_PRIVATE_DATA_SIZE, DREP_PD_SEED);
  wait_event_from(0, id, IB_CM_TIMEWAIT_EXIT, 20000);
}

static void disconnect_passively(struct ib_cm_id *id) {
  const struct cm_ev *dreq = wait_event_from(0, id, IB_CM_DREQ_RECEIVED, 20000);
  check_pd(dreq, DREQ_PD_AT, IB_CM_DREQ_PRIVATE_DATA_SIZE, DREQ_PD_SEED);
  wait_event_from(0, id, IB_CM_TIMEWAIT_EXIT, 20000);
}

static void set_drep_pattern(void) {
  uint8_t pd[IB_CM_DREP_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), DREP_PD_SEED);
  set_drep_data(pd, sizeof(pd));
}

static int server(const char *dir, char who) {
  struct ib_cm_id *listener = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_cm_listen(listener, htobe64(service_id())), 0);
  set_drep_pattern();
  write_gid(dir);
  const struct cm_ev *req = wait_event_from(0, NULL, IB_CM_REQ_RECEIVED, 20000);
  check_pd(req, REQ_PD_AT, IB_CM_REQ_PRIVATE_DATA_SIZE, REQ_PD_SEED);
  CHECK_EQ(req->path.rec_type, SA_PATH_REC_TYPE_IB);
  /* The path as the passive side sees it (cm_format_paths_from_req). */
  printf("REQ_RECEIVED: LID-routed from LID %u to this port's LID %u, SL %u, no GRH\n",
         be16toh(req->path.ib.dlid), be16toh(req->path.ib.slid), req->path.sl);
  struct ib_cm_id *id = req->id;
  const struct cm_ev *rtu = wait_event_from(0, id, IB_CM_RTU_RECEIVED, 20000);
  /* A DREQ may have come right behind the RTU. */
  CHECK(rtu->state == IB_CM_ESTABLISHED ||
        ((who == 'a' || who == 'w') && rtu->state == IB_CM_DREQ_RCVD));
  if (who == 'k') {
    char name[512];
    snprintf(name, sizeof(name), "%s/server.pid", dir);
    FILE *f = fopen(name, "w");
    CHECK(f != NULL);
    fprintf(f, "%d\n", (int)getpid());
    CHECK_EQ(fclose(f), 0);
    sleep_ms(60000);
    test_fail(__FILE__, __LINE__, "not killed within 60 s");
  }
  if (who == 'b')
    disconnect_actively(id);
  else
    disconnect_passively(id);
  CHECK_STATE(id, IB_CM_IDLE);
  ib_destroy_cm_id(id);
  ib_destroy_cm_id(listener);
  return 0;
}

/* The path of the last send_req. */
static struct sa_path_rec req_path;

static struct ib_cm_id *send_req(const char *dir, uint64_t service_id) {
  union ib_gid gid = read_gid(dir);
  struct sa_path_rec *path = &req_path;
  path_to(&gid, path);
  struct conn_opts o;
  conn_opts_default(&o);
  o.service_id = service_id;
  o.remote_cm_response_timeout = o.local_cm_response_timeout = 18; /* 1 s */
  struct ib_cm_req_param req;
  req_param_init(&req, path, &o, next_qpn());
  struct ib_cm_id *id = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_send_cm_req(id, &req), 0);
  return id;
}

/* The peer process was killed (run.sh touches DIR/killed then): the DREQ
 * goes unanswered through every retry, then DREQ_ERROR and timewait, as the
 * kernel's cm_dreq_handler-less side sees it. */
static void disconnect_a_dead_peer(const char *dir, struct ib_cm_id *id) {
  char name[512];
  snprintf(name, sizeof(name), "%s/killed", dir);
  for (long long until = now_ms() + 30000; access(name, F_OK) != 0;) {
    if (now_ms() > until)
      test_fail(__FILE__, __LINE__, "the peer was not killed within 30 s");
    sleep_ms(50);
  }
  CHECK_EQ(ib_send_cm_dreq(id, NULL, 0), 0);
  if (getenv("IBCM_SWITCH_SOCKET")) {
    /* The peer's ibcmd answers for the dead process at once. */
    wait_event_from(0, id, IB_CM_DREP_RECEIVED, 30000);
    wait_event_from(0, id, IB_CM_TIMEWAIT_EXIT, 30000);
    printf("DREP_RECEIVED then TIMEWAIT_EXIT: the dead peer's ibcmd answered\n");
    return;
  }
  const struct cm_ev *err = wait_event_from(0, id, IB_CM_DREQ_ERROR, 30000);
  CHECK_EQ(err->state, IB_CM_TIMEWAIT);
  wait_event_from(0, id, IB_CM_TIMEWAIT_EXIT, 30000);
  CHECK_EQ(count_events(id, IB_CM_DREP_RECEIVED), 0);
  printf("DREQ_ERROR then TIMEWAIT_EXIT: the dead peer never answered\n");
}

static void wait_files(const char *dir, const char *what, int n);

static int client(const char *dir, char who) {
  set_drep_pattern();
  struct ib_cm_id *id = send_req(dir, service_id());
  const struct cm_ev *rep = wait_event_from(0, id, IB_CM_REP_RECEIVED, 20000);
  check_pd(rep, REP_PD_AT, IB_CM_REP_PRIVATE_DATA_SIZE, REP_PD_SEED);
  if (who != 'b') /* else the peer's DREQ may be here already */
    CHECK_STATE(id, IB_CM_ESTABLISHED);
  if (who == 'w')
    wait_files(dir, "killed", 0); /* run.sh touches it */
  if (who == 'k')
    disconnect_a_dead_peer(dir, id);
  else if (who == 'a' || who == 'w')
    disconnect_actively(id);
  else
    disconnect_passively(id);
  CHECK_STATE(id, IB_CM_IDLE);
  ib_destroy_cm_id(id);
  return 0;
}

/* A REQ to a port whose CM has no listener: REJ, "invalid service ID", as
 * the kernel's cm_req_handler answers it. */
static int rej(const char *dir) {
  struct ib_cm_id *id = send_req(dir, SERVICE_ID + 1);
  const struct cm_ev *e = wait_event_from(0, id, IB_CM_REJ_RECEIVED, 20000);
  CHECK_EQ(e->param.rej_rcvd.reason, IB_CM_REJ_INVALID_SERVICE_ID);
  CHECK_STATE(id, IB_CM_IDLE);
  printf("REJ_RECEIVED: reason %d (IB_CM_REJ_INVALID_SERVICE_ID)\n", e->param.rej_rcvd.reason);
  ib_destroy_cm_id(id);
  return 0;
}

/* Answers a SIDR REQ from the handler, as a kernel ULP does. */
static int sidr_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  struct cm_ev *e = capture_event(cm_id, event);
  if (event->event == IB_CM_SIDR_REQ_RECEIVED) {
    static uint8_t pd[IB_CM_SIDR_REP_PRIVATE_DATA_SIZE];
    fill_pattern(pd, sizeof(pd), SIDR_REP_PD_SEED);
    struct ib_cm_sidr_rep_param rep;
    memset(&rep, 0, sizeof(rep));
    rep.qp_num = SIDR_QPN;
    rep.qkey = SIDR_QKEY;
    rep.status = IB_SIDR_SUCCESS;
    rep.private_data = pd;
    rep.private_data_len = sizeof(pd);
    CHECK_EQ(ib_send_cm_sidr_rep(cm_id, &rep), 0);
  }
  publish_event(e);
  return 0;
}

static int sidr_server(const char *dir) {
  struct ib_cm_id *listener = create_id(dev_a, sidr_handler, NULL);
  CHECK_EQ(ib_cm_listen(listener, htobe64(SERVICE_ID)), 0);
  write_gid(dir);
  const struct cm_ev *req = wait_event_from(0, NULL, IB_CM_SIDR_REQ_RECEIVED, 20000);
  check_pd(req, SIDR_REQ_PD_AT, IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE, SIDR_REQ_PD_SEED);
  ib_destroy_cm_id(req->id);
  ib_destroy_cm_id(listener);
  return 0;
}

static int sidr_client(const char *dir) {
  union ib_gid gid = read_gid(dir);
  struct sa_path_rec path;
  path_to(&gid, &path);
  static uint8_t pd[IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), SIDR_REQ_PD_SEED);
  struct ib_cm_sidr_req_param req;
  memset(&req, 0, sizeof(req));
  req.path = &path;
  req.service_id = htobe64(SERVICE_ID);
  req.timeout_ms = 1000;
  req.private_data = pd;
  req.private_data_len = sizeof(pd);
  req.max_cm_retries = 3;
  struct ib_cm_id *id = create_id(dev_a, test_handler, NULL);
  CHECK_EQ(ib_send_cm_sidr_req(id, &req), 0);
  const struct cm_ev *rep = wait_event_from(0, id, IB_CM_SIDR_REP_RECEIVED, 20000);
  CHECK_EQ(rep->param.sidr_rep_rcvd.status, IB_SIDR_SUCCESS);
  CHECK_EQ(rep->param.sidr_rep_rcvd.qpn, SIDR_QPN);
  CHECK_EQ(rep->param.sidr_rep_rcvd.qkey, SIDR_QKEY);
  check_pd(rep, SIDR_REP_PD_AT, IB_CM_SIDR_REP_PRIVATE_DATA_SIZE, SIDR_REP_PD_SEED);
  printf("SIDR_REP_RECEIVED: QPN %#x, Q_Key %#x\n", rep->param.sidr_rep_rcvd.qpn,
         rep->param.sidr_rep_rcvd.qkey);
  ib_destroy_cm_id(id);
  return 0;
}

static void write_gid_as(const char *dir, int me) {
  char name[512];
  snprintf(name, sizeof(name), "%s/%d", dir, me);
  CHECK(mkdir(name, 0700) == 0 || errno == EEXIST);
  write_gid(name);
}

/* Checks the private data of every event of `type` logged from `since`.
 * With `stateless` (packet drops on), a DREP may be the one a CM sends for
 * a connection it no longer knows (cm_issue_drep: no private data), when
 * the peer's answers were lost until its timewait ended: counted there. */
static void check_every_pd(unsigned since, enum ib_cm_event_type type, unsigned n, size_t at,
                           size_t len, unsigned seed, unsigned *stateless) {
  for (unsigned i = 0; i < n; i++) {
    const struct cm_ev *e = wait_event_from(since, NULL, type, 60000);
    size_t d = delivered(at, len);
    CHECK(e->pd_len >= d);
    if (stateless && !check_pattern(e->pd, d, seed) && all_zero(e->pd, d))
      ++*stateless;
    else
      CHECK(check_pattern(e->pd, d, seed));
    since = e->seq + 1;
  }
}

/* Creates DIR/WHAT. */
static void touch(const char *dir, const char *what) {
  char name[512];
  snprintf(name, sizeof(name), "%s/%s", dir, what);
  FILE *f = fopen(name, "w");
  CHECK(f != NULL);
  CHECK_EQ(fclose(f), 0);
}

/* Creates DIR/WHAT.ME. */
static void touch_as(const char *dir, const char *what, int me) {
  char name[64];
  snprintf(name, sizeof(name), "%s.%d", what, me);
  touch(dir, name);
}

/* Waits (60 s at most) until DIR/WHAT.0 .. DIR/WHAT.(N-1) all exist, or
 * DIR/WHAT alone when n is 0. */
static void wait_files(const char *dir, const char *what, int n) {
  long long until = now_ms() + 60000;
  for (int i = n ? 0 : -1; i < n; i++) {
    char name[512];
    if (n)
      snprintf(name, sizeof(name), "%s/%s.%d", dir, what, i);
    else
      snprintf(name, sizeof(name), "%s/%s", dir, what);
    while (access(name, F_OK) != 0) {
      if (now_ms() > until)
        test_fail(__FILE__, __LINE__, "no %s after 60 s", name);
      sleep_ms(20);
    }
  }
}

#define MESH_MAX 1024 /* make ibscale: 128 HCAs x 8 processes behind ibcmd */

/* Whether processes `me` and `j` of the mesh connect: P (lanes) processes a
 * host, each connected to its own lane on every other host. */
static bool mesh_peers(int me, int j, int lanes) {
  return me != j && me % lanes == j % lanes && me / lanes != j / lanes;
}

/* The GIDs of every later peer and, unless paths are resolved per
 * connection, their paths from the SA, before any REQ: the scenario with
 * packet drops turns them on only after this. */
static void mesh_paths(const char *dir, int n, int me, int lanes, bool per_connection,
                       union ib_gid *gids, struct sa_path_rec *paths) {
  for (int j = me + 1; j < n; j++) {
    if (!mesh_peers(me, j, lanes))
      continue;
    char peer_dir[512];
    snprintf(peer_dir, sizeof(peer_dir), "%s/%d", dir, j);
    gids[j] = read_gid(peer_dir);
    if (!per_connection)
      path_to(&gids[j], &paths[j]);
  }
}

/* The mesh's ids go as a ULP's do once they leave timewait: the handler
 * returns non-zero on TIMEWAIT_EXIT and the CM destroys the id. A peer's
 * DREQ repeated after that (its DREP lost) then gets a stateless DREP
 * (cm_issue_drep). An id left IDLE until its process is done with all its
 * other connections would drop it (cm_dreq_handler's default case): on a
 * 64-HCA fat tree with drops, a process still retrying its own DREQs kept
 * its finished ids IDLE for 48 s, and a peer's DREQ to one of them ended in
 * DREQ_ERROR after 16 tries. */
static int mesh_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  int ret = test_handler(cm_id, event);
  return event->event == IB_CM_TIMEWAIT_EXIT ? 1 : ret;
}

static int mesh(const char *dir, int n, int me, int rounds, bool lossy) {
  CHECK(n <= MESH_MAX);
  int own = getenv("IBFABRIC_SERVICE") != NULL; /* a service ID per process */
  struct ib_cm_id *listener = create_id(dev_a, mesh_handler, NULL);
  CHECK_EQ(ib_cm_listen(listener, htobe64(service_id() + (own ? (uint64_t)me : 0))), 0);
  set_drep_pattern();
  write_gid_as(dir, me);
  const char *lanes_env = getenv("IBFABRIC_MESH_LANES");
  int lanes = lanes_env ? atoi(lanes_env) : 1;
  CHECK(lanes >= 1 && n % lanes == 0);
  bool per_connection = getenv("IBFABRIC_PATH_PER_CONNECTION") != NULL;
  static struct sa_path_rec paths[MESH_MAX];
  static union ib_gid gids[MESH_MAX];
  mesh_paths(dir, n, me, lanes, per_connection, gids, paths);
  touch_as(dir, "ready", me);
  wait_files(dir, "go", 0);
  long long t0 = now_ms();
  int actives = 0, passives = 0;
  for (int j = 0; j < n; j++)
    if (mesh_peers(me, j, lanes))
      j > me ? actives++ : passives++;
  actives *= rounds;
  passives *= rounds;
  struct ib_cm_id **ids = calloc((size_t)actives + 1, sizeof(*ids));
  CHECK(ids != NULL);
  int k = 0;
  for (int j = me + 1; j < n; j++) {
    if (!mesh_peers(me, j, lanes))
      continue;
    struct conn_opts o;
    conn_opts_default(&o);
    o.remote_cm_response_timeout = o.local_cm_response_timeout = 18;
    o.service_id = service_id() + (own ? (uint64_t)j : 0);
    /* 10% loss on the links between the switches: a DREQ and its DREP
     * crossing two lossy ports each way are lost together about a third of
     * the time, so 5 retries (6 tries: ~0.15% per connection) ended a
     * connection of 240 with DREQ_ERROR in one fresh-clone run, as the
     * kernel's CM would there. 15 retries (the most the REQ can say) make
     * that ~1e-7 per connection. */
    if (lossy)
      o.max_cm_retries = 15;
    if (getenv("IBFABRIC_ROCE")) {
      /* Nine processes on the VM's one emulated CPU: a REP may wait for its
       * RTU longer than 5 retries of 1 s. */
      o.remote_cm_response_timeout = o.local_cm_response_timeout = 20;
      o.max_cm_retries = 15;
    }
    for (int r = 0; r < rounds; r++) {
      if (per_connection)
        path_to(&gids[j], &paths[j]);
      struct ib_cm_req_param req;
      req_param_init(&req, &paths[j], &o, next_qpn());
      ids[k] = create_id(dev_a, mesh_handler, NULL);
      CHECK_EQ(ib_send_cm_req(ids[k++], &req), 0);
    }
  }
  /* Established both ways: REPs for ours, RTUs for theirs. */
  wait_count(IB_CM_REP_RECEIVED, (unsigned)actives, 60000);
  wait_count(IB_CM_RTU_RECEIVED, (unsigned)passives, 60000);
  long long t_up = now_ms();
  /* Nobody disconnects before every process is up: a DREQ overtaking a
   * lost RTU would end that connection in REP_SENT, without RTU_RECEIVED
   * (as the kernel's cm_dreq_handler does). */
  touch_as(dir, "up", me);
  wait_files(dir, "up", n);
  unsigned mark = log_mark();
  uint8_t pd[IB_CM_DREQ_PRIVATE_DATA_SIZE];
  fill_pattern(pd, sizeof(pd), DREQ_PD_SEED);
  for (int i = 0; i < actives; i++)
    CHECK_EQ(ib_send_cm_dreq(ids[i], pd, sizeof(pd)), 0);
  unsigned stateless = 0;
  /* On SoftRoCE too a MAD can be lost (one DREQ or DREP of 280 in one CI
   * run, not reproduced in 23 runs since): the DREQ is sent again after
   * 4.3 s, when the peer's timewait is over, and gets the stateless DREP
   * (cm_issue_drep), as from the kernel's CM. Accepted there only for a
   * DREQ this process counted as retransmitted (checked below). */
  bool roce = getenv("IBFABRIC_ROCE") != NULL;
  check_every_pd(mark, IB_CM_DREP_RECEIVED, (unsigned)actives, DREP_PD_AT,
                 IB_CM_DREP_PRIVATE_DATA_SIZE, DREP_PD_SEED,
                 lossy || roce ? &stateless : NULL);
  check_every_pd(0, IB_CM_DREQ_RECEIVED, (unsigned)passives, DREQ_PD_AT,
                 IB_CM_DREQ_PRIVATE_DATA_SIZE, DREQ_PD_SEED, NULL);
  wait_count(IB_CM_TIMEWAIT_EXIT, (unsigned)(actives + passives), 60000);
  long long t_down = now_ms();
  CHECK_EQ(count_events(NULL, IB_CM_REJ_RECEIVED), 0);
  CHECK_EQ(count_events(NULL, IB_CM_DREQ_ERROR), 0);
  /* Every id is gone by now: mesh_handler had the CM destroy each at its
   * TIMEWAIT_EXIT. */
  /* Nobody closes its device before everybody is down: only a CM still
   * there answers a repeated DREQ. */
  touch_as(dir, "down", me);
  wait_files(dir, "down", n);
  struct ibcm_counters c;
  CHECK_EQ(ibcm_get_counters(dev_a, 1, &c), 0);
  unsigned long long tx = 0, retries = 0, dups = 0;
  for (int i = 0; i < 11; i++) {
    tx += c.cm_tx_msgs[i];
    retries += c.cm_tx_retries[i];
    dups += c.cm_rx_duplicates[i];
  }
  if (!lossy && stateless > 0) {
    printf("mesh %d: %u stateless DREPs after %llu DREQ retransmissions (a MAD lost)\n", me,
           stateless, (unsigned long long)c.cm_tx_retries[IBCM_CNT_DREQ]);
    CHECK(c.cm_tx_retries[IBCM_CNT_DREQ] >= stateless);
  }
  struct ibcm_path_cache_counters pc;
  CHECK_EQ(ibcm_get_path_cache_counters(&pc), 0);
  printf("mesh %d/%d: %d connections (%d active, %d passive) up in %lld ms, down in %lld ms; "
         "%llu MADs sent, %llu retries, %llu duplicates received, %u stateless DREPs; "
         "path cache: %llu hits, %llu SA queries, %llu coalesced, %u path timeouts asked again; "
         "DREQ/DREP private data checked on each\n",
         me, n, actives + passives, actives, passives, t_up - t0, t_down - t_up, tx, retries, dups,
         stateless, (unsigned long long)pc.hits,
         (unsigned long long)(pc.misses + pc.busy_backoffs), (unsigned long long)pc.coalesced,
         path_timeouts);
  free(ids);
  ib_destroy_cm_id(listener);
  return 0;
}

/* --- mesh-slow: an all-to-all whose passive sides fall behind ----------
 * Issue 33. Like mesh, but each process answers the REQs it receives from
 * a thread of its own, one every DELAY ms, in the order they came: the
 * k-th waits k x DELAY, more than an active side's whole patience for the
 * later ones (1 s response timeout, 2 retries: three tries about 3 s apart
 * with the SA's packet lifetime). Without the automatic MRA
 * (IBCM_AUTO_MRA=off, the kernel's drop of a duplicate REQ in REQ_RCVD)
 * those end in REQ_ERROR on the active side (REP_ERROR on the passive,
 * whose late REP nobody wants); with it the passive CM answers each
 * retransmitted REQ with an MRA, the active side waits, and every
 * connection is made. Once every process has its outcome the ids are
 * destroyed (an established one sends its DREQ). */
#define SLOW_MAX (MESH_MAX * 4)

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct ib_cm_id *ids[SLOW_MAX];
  uint32_t qpns[SLOW_MAX];
  int queued, answered;
  bool done;
} slow = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static int slow_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  if (event->event == IB_CM_REQ_RECEIVED) {
    pthread_mutex_lock(&slow.mu);
    CHECK(slow.queued < SLOW_MAX);
    slow.ids[slow.queued] = cm_id;
    slow.qpns[slow.queued++] = event->param.req_rcvd.remote_qpn;
    pthread_cond_signal(&slow.cv);
    pthread_mutex_unlock(&slow.mu);
  }
  return test_handler(cm_id, event); /* reply_req is 0: logs it only */
}

static void *slow_answerer(void *arg) {
  int delay_ms = *(int *)arg;
  pthread_mutex_lock(&slow.mu);
  for (;;) {
    while (slow.answered == slow.queued && !slow.done)
      pthread_cond_wait(&slow.cv, &slow.mu);
    if (slow.answered == slow.queued)
      break;
    int k = slow.answered++;
    pthread_mutex_unlock(&slow.mu);
    sleep_ms(delay_ms);
    /* Refused only if the id went meanwhile; its outcome is counted. */
    (void)answer_req(slow.ids[k], slow.qpns[k]);
    pthread_mutex_lock(&slow.mu);
  }
  pthread_mutex_unlock(&slow.mu);
  return NULL;
}

static int mesh_slow(const char *dir, int n, int me, int rounds, int delay_ms) {
  CHECK(n <= MESH_MAX && rounds >= 1 && n * rounds <= SLOW_MAX && delay_ms >= 0);
  atomic_store(&reply_req, 0);
  struct ib_cm_id *listener = create_id(dev_a, slow_handler, NULL);
  CHECK_EQ(ib_cm_listen(listener, htobe64(service_id())), 0);
  write_gid_as(dir, me);
  static struct sa_path_rec paths[MESH_MAX];
  static union ib_gid gids[MESH_MAX];
  mesh_paths(dir, n, me, 1, false, gids, paths);
  touch_as(dir, "ready", me);
  wait_files(dir, "go", 0);
  pthread_t answerer;
  CHECK_EQ(pthread_create(&answerer, NULL, slow_answerer, &delay_ms), 0);
  long long t0 = now_ms();
  unsigned actives = (unsigned)((n - 1 - me) * rounds), passives = (unsigned)(me * rounds);
  struct ib_cm_id **ids = calloc((size_t)actives + 1, sizeof(*ids));
  CHECK(ids != NULL);
  unsigned k = 0;
  for (int j = me + 1; j < n; j++) {
    struct conn_opts o;
    conn_opts_default(&o);
    o.remote_cm_response_timeout = o.local_cm_response_timeout = 18;
    o.max_cm_retries = 2;
    for (int r = 0; r < rounds; r++) {
      struct ib_cm_req_param req;
      req_param_init(&req, &paths[j], &o, next_qpn());
      ids[k] = create_id(dev_a, slow_handler, NULL);
      CHECK_EQ(ib_send_cm_req(ids[k++], &req), 0);
    }
  }
  /* Every connection's outcome: up (REP_RECEIVED, RTU_RECEIVED) or failed
   * (REQ_ERROR, REP_ERROR). */
  unsigned up_a, up_p, req_err, rep_err;
  long long until = now_ms() + 110000;
  for (;;) {
    up_a = count_events(NULL, IB_CM_REP_RECEIVED);
    up_p = count_events(NULL, IB_CM_RTU_RECEIVED);
    req_err = count_events(NULL, IB_CM_REQ_ERROR);
    rep_err = count_events(NULL, IB_CM_REP_ERROR);
    if (up_a + req_err >= actives && up_p + rep_err >= passives)
      break;
    if (now_ms() > until)
      test_fail(__FILE__, __LINE__, "outcomes: %u+%u of %u active, %u+%u of %u passive", up_a,
                req_err, actives, up_p, rep_err, passives);
    sleep_ms(10);
  }
  long long took = now_ms() - t0;
  struct ibcm_counters c;
  CHECK_EQ(ibcm_get_counters(dev_a, 1, &c), 0);
  printf("mesh-slow %d/%d: answers %d ms apart; %u active: %u up, %u REQ_ERROR, "
         "%u MRA_RECEIVED; %u passive: %u up, %u REP_ERROR; %llu MRAs sent "
         "(cm_tx_retries of MRA), %llu duplicate REQs; outcomes in %lld ms\n",
         me, n, delay_ms, actives, up_a, req_err, count_events(NULL, IB_CM_MRA_RECEIVED),
         passives, up_p, rep_err, (unsigned long long)c.cm_tx_retries[IBCM_CNT_MRA],
         (unsigned long long)c.cm_rx_duplicates[IBCM_CNT_REQ], took);
  fflush(stdout);
  /* Nobody destroys an id before everybody has its outcomes. */
  touch_as(dir, "up", me);
  wait_files(dir, "up", n);
  pthread_mutex_lock(&slow.mu);
  slow.done = true;
  pthread_cond_signal(&slow.cv);
  pthread_mutex_unlock(&slow.mu);
  CHECK_EQ(pthread_join(answerer, NULL), 0);
  for (unsigned i = 0; i < k; i++)
    ib_destroy_cm_id(ids[i]);
  for (int i = 0; i < slow.queued; i++)
    ib_destroy_cm_id(slow.ids[i]);
  ib_destroy_cm_id(listener);
  free(ids);
  /* Nobody exits while the others' DREQs (and the stateless DREPs they
   * get) may still arrive: umad2sim's exit handler hangs on a MAD coming
   * in then. */
  touch_as(dir, "down", me);
  wait_files(dir, "down", n);
  sleep_ms(1000);
  return req_err + rep_err == 0 ? 0 : 1;
}

/* --- lap: a LAP over the fabric -------------------------------------
 * The kernel receives LAPs (cm_lap_handler) but lost ib_send_cm_lap and
 * ib_send_cm_apr in 2019, and so has this library: the client's harness
 * sends the LAP as an older CM would (cm_format_lap), proposing the second
 * LID of each port (OpenSM runs with LMC 1 here) as the alternate path.
 * The server gets IB_CM_LAP_RECEIVED with that path, loads it into its QP
 * attributes (IBV_QP_ALT_PATH) and answers the only way the kernel's API
 * has, an MRA (lap_state MRA_LAP_SENT); the repeated LAP gets the MRA
 * again. The client's CM has no LAP outstanding (lap_state UNINIT), so both
 * MRAs are dropped there, as the kernel's cm_mra_handler drops them. */
#define LAP_PD_SEED 0x88
#define LAP_PD_AT 88
#define LAP_TID 0x4c41500000000001ull

static struct sa_path_rec lap_alt_path;

/* test_handler (it answers the REQ), keeping the LAP's alternate path. */
static int lap_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event) {
  if (event->event != IB_CM_LAP_RECEIVED)
    return test_handler(cm_id, event);
  struct cm_ev *e = capture_event(cm_id, event);
  lap_alt_path = *event->param.lap_rcvd.alternate_path;
  publish_event(e);
  return 0;
}

static void put_be16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
}

static void put_be32(uint8_t *p, uint32_t v) {
  put_be16(p, (uint16_t)(v >> 16));
  put_be16(p + 2, (uint16_t)v);
}

/* cm_format_lap for `id`'s connection: alternate path from this port's
 * LID `slid` to the peer's `dlid`, on the primary path's SL and rate. */
static void send_lap(const struct ib_cm_id *id, uint32_t remote_qpn, const struct sa_path_rec *p,
                     uint16_t slid, uint16_t dlid) {
  struct {
    uint8_t umad[64]; /* struct ib_user_mad's header */
    uint8_t mad[256];
  } m;
  memset(&m, 0, sizeof(m));
  uint8_t *mad = m.mad;
  mad[0] = 1;    /* base version */
  mad[1] = 0x07; /* CM class */
  mad[2] = 2;    /* class version */
  mad[3] = 0x03; /* Send */
  put_be32(mad + 8, (uint32_t)(LAP_TID >> 32));
  put_be32(mad + 12, (uint32_t)LAP_TID);
  put_be16(mad + 16, 0x0019); /* LAP */
  memcpy(mad + 24, &id->local_id, 4);  /* __be32 already */
  memcpy(mad + 28, &id->remote_id, 4);
  put_be32(mad + 36, remote_qpn << 8);
  mad[39] = (uint8_t)(18 << 3); /* remote CM response timeout */
  put_be16(mad + 44, slid);     /* alternate local port LID */
  put_be16(mad + 46, dlid);     /* alternate remote port LID */
  memcpy(mad + 48, p->sgid.raw, 16);
  memcpy(mad + 64, p->dgid.raw, 16);
  mad[85] = p->rate;
  mad[86] = (uint8_t)(p->sl << 4 | 0x08); /* subnet local */
  mad[87] = (uint8_t)(19 << 3);           /* local ACK timeout */
  fill_pattern(mad + LAP_PD_AT, IB_CM_LAP_PRIVATE_DATA_SIZE, LAP_PD_SEED);
  /* struct ib_user_mad: agent_id, status, timeout_ms, retries, length,
   * then ib_mad_addr: qpn, qkey, lid, sl, ... (all big-endian) */
  put_be32(m.umad + 20, 1);          /* QP1 */
  put_be32(m.umad + 24, 0x80010000); /* the GSI Q_Key */
  put_be16(m.umad + 28, be16toh(p->ib.dlid)); /* the primary path's way there */
  m.umad[30] = p->sl;
  CHECK_EQ(harness_send(harness_fd, harness_qp1_agent, &m, sizeof(m.mad), 0, 0), 0);
}

static int lap_server(const char *dir) {
  struct ib_cm_id *listener = create_id(dev_a, lap_handler, NULL);
  CHECK_EQ(ib_cm_listen(listener, htobe64(SERVICE_ID)), 0);
  set_drep_pattern();
  write_gid(dir);
  const struct cm_ev *req = wait_event_from(0, NULL, IB_CM_REQ_RECEIVED, 20000);
  struct sa_path_rec primary = req->path;
  struct ib_cm_id *id = req->id;
  wait_event_from(0, id, IB_CM_RTU_RECEIVED, 20000);
  const struct cm_ev *lap = wait_event_from(0, id, IB_CM_LAP_RECEIVED, 20000);
  check_pd(lap, LAP_PD_AT, IB_CM_LAP_PRIVATE_DATA_SIZE, LAP_PD_SEED);
  /* This side's view: the LAP's "local" is the peer (cm_format_path_from_lap). */
  const struct sa_path_rec *alt = &lap_alt_path;
  printf("LAP_RECEIVED: alternate path LID %u -> %u (primary %u -> %u), SL %u, lap_state %d\n",
         be16toh(alt->ib.slid), be16toh(alt->ib.dlid), be16toh(primary.ib.slid),
         be16toh(primary.ib.dlid), alt->sl, id->lap_state);
  CHECK_EQ(alt->rec_type, SA_PATH_REC_TYPE_IB);
  CHECK_EQ(be16toh(alt->ib.dlid), be16toh(primary.ib.dlid) + 1);
  CHECK_EQ(be16toh(alt->ib.slid), be16toh(primary.ib.slid) + 1);
  CHECK(!memcmp(alt->dgid.raw, primary.dgid.raw, 16) && !memcmp(alt->sgid.raw, primary.sgid.raw, 16));
  CHECK_EQ(alt->sl, primary.sl);
  CHECK_EQ(id->lap_state, IB_CM_LAP_RCVD);
  /* What a ULP then loads into its QP (cm_init_qp_rts_attr). */
  struct ibv_qp_attr qa;
  int mask = 0;
  memset(&qa, 0, sizeof(qa));
  qa.qp_state = IBV_QPS_RTS;
  CHECK_EQ(ib_cm_init_qp_attr(id, &qa, &mask), 0);
  CHECK(mask & IBV_QP_ALT_PATH);
  CHECK_EQ(qa.alt_ah_attr.dlid, be16toh(primary.ib.dlid) + 1);
  CHECK_EQ(qa.path_mig_state, IBV_MIG_REARM);
  printf("RTS attributes: IBV_QP_ALT_PATH, alternate DLID %u, path_mig_state REARM\n",
         qa.alt_ah_attr.dlid);
  /* The kernel's only answer: an MRA. */
  CHECK_EQ(ib_send_cm_mra(id, 20, NULL, 0), 0);
  CHECK_EQ(id->lap_state, IB_CM_MRA_LAP_SENT);
  touch(dir, "mra-sent");
  /* The repeated LAP: no second event, the MRA again (a duplicate). */
  wait_files(dir, "lap-repeated", 0);
  struct ibcm_counters c;
  /* The duplicate is counted before the MRA goes again (cm_lap_handler
   * does the same): wait for both, or a loaded machine reads in between. */
  for (long long until = now_ms() + 20000;; sleep_ms(20)) {
    CHECK_EQ(ibcm_get_counters(dev_a, 1, &c), 0);
    if ((c.cm_rx_duplicates[IBCM_CNT_LAP] >= 1 && c.cm_tx_msgs[IBCM_CNT_MRA] >= 3) ||
        now_ms() > until)
      break;
  }
  CHECK_EQ(c.cm_rx_msgs[IBCM_CNT_LAP], 2);
  CHECK_EQ(c.cm_rx_duplicates[IBCM_CNT_LAP], 1);
  /* The MRA again, booked as the kernel books a reply to a retry
   * (CM_DIRECT_RETRY_CTX): one message plus one retry, so 1 + 2. */
  CHECK_EQ(c.cm_tx_msgs[IBCM_CNT_MRA], 3);
  CHECK_EQ(c.cm_tx_retries[IBCM_CNT_MRA], 1);
  CHECK_EQ(count_events(id, IB_CM_LAP_RECEIVED), 1);
  printf("the repeated LAP: no event, the MRA again (cm_tx_msgs[MRA] %llu, retries %llu)\n",
         (unsigned long long)c.cm_tx_msgs[IBCM_CNT_MRA],
         (unsigned long long)c.cm_tx_retries[IBCM_CNT_MRA]);
  touch(dir, "mra-again");
  disconnect_passively(id);
  CHECK_STATE(id, IB_CM_IDLE);
  ib_destroy_cm_id(id);
  ib_destroy_cm_id(listener);
  return 0;
}

static int lap_client(const char *dir, uint16_t alt_slid, uint16_t alt_dlid) {
  set_drep_pattern();
  struct ib_cm_id *id = send_req(dir, SERVICE_ID);
  const struct sa_path_rec *path = &req_path;
  const struct cm_ev *rep = wait_event_from(0, id, IB_CM_REP_RECEIVED, 20000);
  CHECK_STATE(id, IB_CM_ESTABLISHED);
  uint32_t remote_qpn = rep->param.rep_rcvd.remote_qpn;
  struct ibcm_counters before, after;
  CHECK_EQ(ibcm_get_counters(dev_a, 1, &before), 0);
  send_lap(id, remote_qpn, path, alt_slid, alt_dlid);
  printf("LAP sent: alternate path LID %u -> %u (primary %u -> %u)\n", alt_slid, alt_dlid,
         be16toh(path->ib.slid), be16toh(path->ib.dlid));
  wait_files(dir, "mra-sent", 0);
  send_lap(id, remote_qpn, path, alt_slid, alt_dlid);
  touch(dir, "lap-repeated");
  wait_files(dir, "mra-again", 0);
  for (long long until = now_ms() + 20000;; sleep_ms(20)) {
    CHECK_EQ(ibcm_get_counters(dev_a, 1, &after), 0);
    /* A MRA is counted received before its handler finds it unmatched. */
    if ((after.cm_rx_msgs[IBCM_CNT_MRA] - before.cm_rx_msgs[IBCM_CNT_MRA] >= 2 &&
         after.rx_unmatched - before.rx_unmatched >= 2) ||
        now_ms() > until)
      break;
  }
  CHECK_EQ(after.cm_rx_msgs[IBCM_CNT_MRA] - before.cm_rx_msgs[IBCM_CNT_MRA], 2);
  CHECK_EQ(after.rx_unmatched - before.rx_unmatched, 2);
  CHECK_EQ(id->lap_state, IB_CM_LAP_UNINIT);
  CHECK_EQ(count_events(id, IB_CM_MRA_RECEIVED) + count_events(id, IB_CM_APR_RECEIVED), 0);
  printf("the server's 2 MRAs: dropped (no LAP of ours outstanding), no event\n");
  disconnect_actively(id);
  CHECK_STATE(id, IB_CM_IDLE);
  ib_destroy_cm_id(id);
  return 0;
}

static int idle(const char *dir) {
  char stop[512];
  write_gid(dir);
  snprintf(stop, sizeof(stop), "%s/stop", dir);
  for (long long until = now_ms() + 30000; now_ms() < until && access(stop, F_OK) != 0;)
    sleep_ms(50);
  return 0;
}

/* The GID of the port whose GUID `guid` is, in the default subnet. */
static union ib_gid gid_of_port(const char *guid) {
  union ib_gid gid = {.raw = {0xfe, 0x80}};
  uint64_t be = htobe64(strtoull(guid, NULL, 0));
  memcpy(&gid.raw[8], &be, 8);
  return gid;
}

/* ---- the kernel's SA API (scenarios sa-async, sa-cancel) ---------------- */

static struct ib_sa_client sa_client;

/* What one query's callback got, and how often it ran. */
struct sa_outcome {
  atomic_int calls;
  int status;
  unsigned num_prs;
  int resp_null;
  struct sa_path_rec rec;
};

static void sa_callback(int status, struct sa_path_rec *resp, unsigned int num_prs, void *context) {
  struct sa_outcome *o = context;
  o->status = status;
  o->num_prs = num_prs;
  o->resp_null = resp == NULL;
  if (resp)
    o->rec = *resp;
  atomic_fetch_add(&o->calls, 1); /* publishes the fields above */
}

static void sa_wait_called(struct sa_outcome *o) {
  long long until = now_ms() + TIMEOUT_MS;
  while (atomic_load(&o->calls) == 0) {
    if (now_ms() > until)
      test_fail(__FILE__, __LINE__, "no SA callback after %d ms", TIMEOUT_MS);
    sleep_ms(1);
  }
}

/* What ibcm_init_path asks the SA for, as rdma_cm's route query. */
static int sa_query(const union ib_gid *dgid, unsigned long timeout_ms, struct sa_outcome *o,
                    struct ib_sa_query **q) {
  struct sa_path_rec rec;
  memset(&rec, 0, sizeof(rec));
  rec.sgid = gid_a;
  rec.dgid = *dgid;
  rec.pkey = htobe16(0xffff);
  rec.reversible = 1;
  rec.numb_path = 1;
  rec.rec_type = SA_PATH_REC_TYPE_IB;
  return ib_sa_path_rec_get(&sa_client, dev_a, 1, &rec,
                            IB_SA_PATH_REC_DGID | IB_SA_PATH_REC_SGID | IB_SA_PATH_REC_REVERSIBLE |
                                IB_SA_PATH_REC_NUMB_PATH | IB_SA_PATH_REC_PKEY,
                            timeout_ms, GFP_KERNEL, sa_callback, o, q);
}

/* The path the callback gets, printed as `path` prints ibcm_init_path's. */
static int sa_async(const char *guid) {
  union ib_gid gid = gid_of_port(guid);
  struct sa_outcome o = {0};
  struct ib_sa_query *q = NULL;
  ib_sa_register_client(&sa_client);
  int id = sa_query(&gid, 2000, &o, &q);
  CHECK(id >= 0 && q != NULL);
  sa_wait_called(&o);
  ib_sa_unregister_client(&sa_client);
  fprintf(stderr, "query %d: status %d, %u record(s)\n", id, o.status, o.num_prs);
  CHECK_EQ(o.status, 0);
  CHECK_EQ(o.num_prs, 1);
  CHECK_EQ(o.rec.rec_type, SA_PATH_REC_TYPE_IB);
  CHECK(memcmp(o.rec.dgid.raw, gid.raw, 16) == 0);
  CHECK_EQ(atomic_load(&o.calls), 1);
  print_path(&o.rec);
  return 0;
}

/* Run with the SM stopped, so that no answer can beat the cancel: the
 * cancelled query calls back -EINTR once; a second one, left alone, times
 * out (nobody answers indeed), and the first is not called again. */
static int sa_cancel(const char *guid) {
  union ib_gid gid = gid_of_port(guid);
  struct sa_outcome cancelled = {0}, left = {0};
  struct ib_sa_query *q1, *q2;
  ib_sa_register_client(&sa_client);
  int id1 = sa_query(&gid, 60000, &cancelled, &q1);
  CHECK(id1 >= 0);
  ib_sa_cancel_query(id1, q1);
  ib_sa_cancel_query(id1, q1);
  sa_wait_called(&cancelled);
  long long t0 = now_ms();
  int id2 = sa_query(&gid, 300, &left, &q2);
  CHECK(id2 >= 0 && id2 != id1);
  sa_wait_called(&left);
  long long waited = now_ms() - t0;
  ib_sa_cancel_query(id2, q2); /* over: nothing */
  ib_sa_unregister_client(&sa_client);
  printf("cancelled query %d: %d (%s), %d callback(s), resp %s\n", id1, cancelled.status,
         strerror(-cancelled.status), atomic_load(&cancelled.calls),
         cancelled.resp_null ? "NULL" : "set");
  printf("query %d left alone: %d (%s) after %lld ms, %d callback(s)\n", id2, left.status,
         strerror(-left.status), waited, atomic_load(&left.calls));
  CHECK_EQ(cancelled.status, -EINTR);
  CHECK(cancelled.resp_null);
  CHECK_EQ(left.status, -ETIMEDOUT);
  CHECK_EQ(atomic_load(&cancelled.calls), 1);
  CHECK_EQ(atomic_load(&left.calls), 1);
  return 0;
}

/* ---- an SM that moves (scenario sm-move) ------------------------------- */

/* A path to `guid` through the SM there is now, and how many paths the
 * process's cache dropped so far. */
static unsigned sm_move_path(const char *when, const char *guid) {
  union ib_gid gid = gid_of_port(guid);
  struct sa_path_rec path;
  path_to(&gid, &path);
  struct ibcm_path_cache_counters c;
  CHECK_EQ(ibcm_get_path_cache_counters(&c), 0);
  printf("%s: path to %s: dlid %u; cache misses %llu invalidations %llu\n", when, guid,
         be16toh(path.ib.dlid), (unsigned long long)c.misses,
         (unsigned long long)c.invalidations);
  return (unsigned)c.invalidations;
}

/* Paths to GUID1 before the SM moves (DIR/ready, with this process's pid in
 * DIR/peer.pid: the script rewrites its sysfs) and after (DIR/moved): to
 * GUID1 again, which the port watcher must have dropped, and to GUID2, new. */
static int sm_move(const char *guid1, const char *guid2, const char *dir) {
  char path[512];
  sm_move_path("before", guid1);
  snprintf(path, sizeof(path), "%s/peer.pid", dir);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  fprintf(f, "%d\n", (int)getpid());
  fclose(f);
  snprintf(path, sizeof(path), "%s/ready", dir);
  close(open(path, O_CREAT | O_WRONLY, 0644));
  snprintf(path, sizeof(path), "%s/moved", dir);
  for (int i = 0; access(path, F_OK) != 0; i++) {
    CHECK(i < 900); /* 90 s */
    usleep(100 * 1000);
  }
  unsigned dropped = sm_move_path("after", guid1);
  /* The path cached before the SM moved was dropped. */
  CHECK(dropped >= 1);
  sm_move_path("after, new destination", guid2);
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3)
    return 2;
  /* sm-move only asks paths: an SM-capable port that never answers
   * SMInfo would hold a new OpenSM in DISCOVERING while it polls it. */
  if (!getenv("IBCM_SWITCH_SOCKET") && strcmp(argv[1], "sm-move"))
    ibsim_harness_steps();
  test_init_one();
  int rc = 2;
  if (!strcmp(argv[1], "path")) {
    union ib_gid gid = gid_of_port(argv[2]);
    struct sa_path_rec path;
    path_to(&gid, &path);
    print_path(&path);
    rc = 0;
  } else if (!strcmp(argv[1], "sm-move") && argc > 4) {
    rc = sm_move(argv[2], argv[3], argv[4]);
  } else if (!strcmp(argv[1], "sa-rate") && argc > 3) {
    /* COUNT path queries one after the other (run with the path cache off:
     * each one the SA's): the SA's service time as this fabric gives it. */
    union ib_gid gid = gid_of_port(argv[2]);
    int count = atoi(argv[3]);
    CHECK(count > 0);
    struct sa_path_rec path;
    path_to(&gid, &path); /* the SA agent and the route warm */
    long long t0 = now_ms();
    for (int i = 0; i < count; i++)
      path_to(&gid, &path);
    long long took = now_ms() - t0;
    struct ibcm_path_cache_counters pc;
    CHECK_EQ(ibcm_get_path_cache_counters(&pc), 0);
    printf("sa-rate: %d path queries in %lld ms: %.0f us each, %llu asked of the SA\n", count,
           took, took * 1000.0 / count, (unsigned long long)(pc.misses + pc.busy_backoffs));
    /* With the cache off (IBCM_PATH_CACHE_TTL_MS=0) every call is a query. */
    const char *ttl = getenv("IBCM_PATH_CACHE_TTL_MS");
    if (ttl && !strcmp(ttl, "0"))
      CHECK_EQ(pc.misses + pc.busy_backoffs, (uint64_t)count + 1);
    rc = 0;
  } else if (!strcmp(argv[1], "patherr") && argc > 3) {
    union ib_gid gid = gid_of_port(argv[2]);
    struct sa_path_rec path;
    long long t0 = now_ms();
    int err = ibcm_init_path(dev_a, 1, &gid, &path);
    printf("ibcm_init_path to %s: %d (%s) after %lld ms\n", argv[2], err, strerror(-err),
           now_ms() - t0);
    CHECK_EQ(err, -atoi(argv[3]));
    rc = 0;
  } else if (!strcmp(argv[1], "server") && argc > 3) {
    rc = server(argv[2], argv[3][0]);
  } else if (!strcmp(argv[1], "client") && argc > 3) {
    rc = client(argv[2], argv[3][0]);
  } else if (!strcmp(argv[1], "sidr-server")) {
    rc = sidr_server(argv[2]);
  } else if (!strcmp(argv[1], "sidr-client")) {
    rc = sidr_client(argv[2]);
  } else if (!strcmp(argv[1], "mesh") && argc > 5) {
    rc = mesh(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]),
              argc > 6 && !strcmp(argv[6], "lossy"));
  } else if (!strcmp(argv[1], "mesh-slow") && argc > 6) {
    rc = mesh_slow(argv[2], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]));
  } else if (!strcmp(argv[1], "lap-server")) {
    rc = lap_server(argv[2]);
  } else if (!strcmp(argv[1], "lap-client") && argc > 4) {
    rc = lap_client(argv[2], (uint16_t)atoi(argv[3]), (uint16_t)atoi(argv[4]));
  } else if (!strcmp(argv[1], "idle")) {
    rc = idle(argv[2]);
  } else if (!strcmp(argv[1], "rej")) {
    rc = rej(argv[2]);
  } else if (!strcmp(argv[1], "sa-async")) {
    rc = sa_async(argv[2]);
  } else if (!strcmp(argv[1], "sa-cancel")) {
    rc = sa_cancel(argv[2]);
  }
  test_finish();
  return rc;
}
