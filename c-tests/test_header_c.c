/*
 * <rdma/ib_cm.h> on its own, in strict ISO C11 (-std=c11, no GNU extensions):
 * it includes what it needs, and a ULP can use its types, enums and
 * functions. The build also checks the byte-order macros
 * (IB_CM_ASSIGN_SERVICE_ID, CM_DREQ_ATTR_ID, ...) in strict C11 as constant
 * expressions (_Static_assert, `case CM_DREQ_ATTR_ID:`), as the kernel's
 * cpu_to_be16()/cpu_to_be64() constants are; the result is reported here.
 */
#include <rdma/ib_cm.h>

/* The one library function used without its header: ISO C allows declaring it. */
int puts(const char *s);

#ifndef IBCM_BYTEORDER_MACROS_OK
#define IBCM_BYTEORDER_MACROS_OK 1
#endif

static int handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event)
{
	return cm_id == NULL || event->event == IB_CM_REQ_ERROR;
}

int main(void)
{
	struct ib_cm_id id = {0};
	struct ib_cm_event event = {0};
	struct ib_cm_req_param req = {0};
	struct ib_cm_rep_param rep = {0};
	struct sa_path_rec path = {0};
	union ib_gid gid = {{0}};
	ib_cm_handler h = handler;
	int (*dreq)(struct ib_cm_id *, const void *, uint8_t) = ib_send_cm_dreq;
	int (*drep)(struct ib_cm_id *, const void *, uint8_t) = ib_send_cm_drep;

	id.cm_handler = h;
	id.state = IB_CM_ESTABLISHED;
	event.event = IB_CM_DREQ_RECEIVED;
	event.param.send_status = IB_WC_RESP_TIMEOUT_ERR;
	req.qp_type = IB_QPT_RC;
	req.primary_path = &path;
	rep.private_data_len = IB_CM_REP_PRIVATE_DATA_SIZE;
	path.dgid = gid;
	path.rec_type = SA_PATH_REC_TYPE_IB;

	if (req.primary_path->rec_type != SA_PATH_REC_TYPE_IB || rep.private_data_len != 196)
		return 1;
	if (id.cm_handler(&id, &event) != 0 || dreq == NULL || drep == NULL)
		return 1;
	if (!IS_ERR(ERR_PTR(-22)) || PTR_ERR(ERR_PTR(-22)) != -22 || IS_ERR(&id))
		return 1;
	if (IB_CM_DREQ_PRIVATE_DATA_SIZE != 220 || IB_CM_DREP_PRIVATE_DATA_SIZE != 224)
		return 1;
	if (!IBCM_BYTEORDER_MACROS_OK) {
		puts("FAIL: in strict C11 (-std=c11) IB_CM_ASSIGN_SERVICE_ID / "
		     "CM_*_ATTR_ID do not compile as constant expressions (e.g. "
		     "htobe64()/htobe16(), which <endian.h> declares only with "
		     "_DEFAULT_SOURCE, and which are not constants): see the "
		     "check in c-tests/CMakeLists.txt");
		return 1;
	}
	return 0;
}
