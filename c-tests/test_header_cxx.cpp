/*
 * <rdma/ib_cm.h> from C++17: it parses, its functions have C linkage (this
 * links against libib_cm), and the layouts match the C ones.
 */
#include <rdma/ib_cm.h>

#include <endian.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <type_traits>

static_assert(sizeof(struct ib_cm_id) == 56, "struct ib_cm_id");
static_assert(sizeof(struct ib_cm_event) == 96, "struct ib_cm_event");
static_assert(sizeof(struct ib_cm_req_param) == 96, "struct ib_cm_req_param");
static_assert(sizeof(struct ib_cm_rep_param) == 32, "struct ib_cm_rep_param");
static_assert(sizeof(struct sa_path_rec) == 88, "struct sa_path_rec");
static_assert(std::is_standard_layout<ib_cm_id>::value, "ib_cm_id is plain data");
static_assert(IB_CM_ESTABLISHED == 10 && IB_CM_TIMEWAIT_EXIT == 9, "enums");

extern "C" int cxx_handler(struct ib_cm_id *cm_id, const struct ib_cm_event *event);
extern "C" int cxx_handler(struct ib_cm_id *, const struct ib_cm_event *event)
{
	return event->event == IB_CM_DREQ_RECEIVED ? 0 : 1;
}

int main()
{
	ib_cm_handler h = cxx_handler;
	ib_cm_event ev{};
	ev.event = IB_CM_DREQ_RECEIVED;
	if (h(nullptr, &ev) != 0)
		return 1;

	// The byte-order macros are the kernel's __be constants.
	if (IB_CM_ASSIGN_SERVICE_ID != htobe64(0x0200000000000000ULL) ||
	    CM_DREQ_ATTR_ID != htobe16(0x0015))
		return 1;

	// Calls into the library: C linkage, kernel semantics.
	if (std::strcmp(ibcm_reject_msg(IB_CM_REJ_CONSUMER_DEFINED), "consumer defined") != 0) {
		std::fprintf(stderr, "ibcm_reject_msg(28) = %s\n", ibcm_reject_msg(28));
		return 1;
	}
	if (ib_send_cm_dreq(nullptr, nullptr, 0) != -EINVAL)
		return 1;
	struct ib_device *dev = ibcm_open_device(nullptr);
	if (!IS_ERR(dev) || PTR_ERR(dev) != -22)
		return 1;
	return 0;
}
