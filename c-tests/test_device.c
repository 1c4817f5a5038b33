/*
 * The userspace device calls (ibcm_open_device / ibcm_close_device /
 * ibcm_query_gid / ibcm_init_path / ibcm_loop_drop) and ib_create_cm_id on
 * a device: ERR_PTR conventions (IS_ERR / PTR_ERR) and their errnos.
 */
#include "common.h"

int main(void) {
  require_loop();
  const char *name_a = dev_a_name(), *name_b = dev_b_name();

  struct ib_device *a = ibcm_open_device(name_a);
  CHECK(!IS_ERR_OR_NULL(a));
  struct ib_device *again = ibcm_open_device(name_a);
  CHECK(IS_ERR(again));
  CHECK_EQ(PTR_ERR(again), -EBUSY);
  struct ib_device *none = ibcm_open_device("nosuchdev");
  CHECK(IS_ERR(none));
  CHECK_EQ(PTR_ERR(none), -ENODEV);
  struct ib_device *null_name = ibcm_open_device(NULL);
  CHECK(IS_ERR(null_name));
  CHECK_EQ(PTR_ERR(null_name), -EINVAL);

  /* GIDs: index 0 of port 1 only. */
  union ib_gid gid, gid_other;
  CHECK_EQ(ibcm_query_gid(a, 1, 0, &gid), 0);
  CHECK(!all_zero(gid.raw, 16));
  CHECK_EQ(ibcm_query_gid(a, 1, 1, &gid_other), -EINVAL);
  CHECK_EQ(ibcm_query_gid(a, 2, 0, &gid_other), -EINVAL);
  CHECK_EQ(ibcm_query_gid(a, 1, 0, NULL), -EINVAL);
  CHECK_EQ(ibcm_query_gid(NULL, 1, 0, &gid_other), -EINVAL);

  /* A path to B. */
  struct ib_device *b = ibcm_open_device(name_b);
  CHECK(!IS_ERR_OR_NULL(b));
  union ib_gid gb;
  CHECK_EQ(ibcm_query_gid(b, 1, 0, &gb), 0);
  CHECK(memcmp(gb.raw, gid.raw, 16) != 0);
  struct sa_path_rec path;
  memset(&path, 0xee, sizeof(path));
  CHECK_EQ(ibcm_init_path(a, 1, &gb, &path), 0);
  CHECK(memcmp(path.dgid.raw, gb.raw, 16) == 0);
  CHECK(memcmp(path.sgid.raw, gid.raw, 16) == 0);
  CHECK_EQ(path.rec_type, SA_PATH_REC_TYPE_IB);
  CHECK(path.pkey == htobe16(0xffff));
  CHECK_EQ(ibcm_init_path(a, 1, NULL, &path), -EINVAL);
  CHECK_EQ(ibcm_init_path(a, 1, &gb, NULL), -EINVAL);
  CHECK_EQ(ibcm_init_path(a, 2, &gb, &path), -EINVAL);

  /* Fault injection: 0, and 0 again to cancel. */
  CHECK_EQ(ibcm_loop_drop(a, 0x0015, 1), 0);
  CHECK_EQ(ibcm_loop_drop(a, 0x0015, 0), 0);

  /* A device with an id cannot close. */
  struct ib_cm_id *id = ib_create_cm_id(a, test_handler, NULL);
  CHECK(!IS_ERR_OR_NULL(id));
  CHECK(id->device == a);
  CHECK_EQ(ibcm_close_device(a), -EBUSY);
  ib_destroy_cm_id(id);
  CHECK_EQ(ibcm_close_device(a), 0);

  /* A closed device takes no ids and no more calls. */
  struct ib_cm_id *late = ib_create_cm_id(a, test_handler, NULL);
  CHECK(IS_ERR(late));
  CHECK_EQ(PTR_ERR(late), -EINVAL);
  CHECK(ibcm_close_device(a) < 0);
  CHECK(ibcm_query_gid(a, 1, 0, &gid_other) < 0);

  /* It can be opened again; NULL device. */
  a = ibcm_open_device(name_a);
  CHECK(!IS_ERR_OR_NULL(a));
  CHECK(IS_ERR(ib_create_cm_id(NULL, test_handler, NULL)));
  CHECK_EQ(ibcm_close_device(a), 0);
  CHECK_EQ(ibcm_close_device(b), 0);
  CHECK(ibcm_close_device(NULL) < 0);
  puts("device: OK");
  return 0;
}
