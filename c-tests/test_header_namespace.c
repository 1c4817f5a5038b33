/*
 * <rdma/ib_cm.h> declares the kernel's names and ibcm_* extensions only: a
 * ULP that includes it keeps its own identifiers. The kernel header has no
 * macros called REQ, DREQ, MAD_SIZE, ... and no struct Errno; a ULP with
 * `enum { REQ, REP };` or its own `MAD_SIZE` must still compile.
 */
#include <rdma/ib_cm.h>

#include <stdio.h>

int main(void)
{
	int leaked = 0;
#define LEAK(name) (printf("header defines non-kernel macro %s\n", #name), leaked++)
#ifdef REQ
	LEAK(REQ);
#endif
#ifdef MRA
	LEAK(MRA);
#endif
#ifdef REJ
	LEAK(REJ);
#endif
#ifdef REP
	LEAK(REP);
#endif
#ifdef RTU
	LEAK(RTU);
#endif
#ifdef DREQ
	LEAK(DREQ);
#endif
#ifdef DREP
	LEAK(DREP);
#endif
#ifdef LAP
	LEAK(LAP);
#endif
#ifdef APR
	LEAK(APR);
#endif
#ifdef SIDR_REQ
	LEAK(SIDR_REQ);
#endif
#ifdef SIDR_REP
	LEAK(SIDR_REP);
#endif
#ifdef CLASS_PORT_INFO
	LEAK(CLASS_PORT_INFO);
#endif
#ifdef MAD_SIZE
	LEAK(MAD_SIZE);
#endif
#ifdef MAD_HDR_SIZE
	LEAK(MAD_HDR_SIZE);
#endif
#ifdef BASE_VERSION
	LEAK(BASE_VERSION);
#endif
#ifdef MGMT_CLASS_CM
	LEAK(MGMT_CLASS_CM);
#endif
#ifdef CM_CLASS_VERSION
	LEAK(CM_CLASS_VERSION);
#endif
#ifdef METHOD_SEND
	LEAK(METHOD_SEND);
#endif
#ifdef DEFAULT_PKEY
	LEAK(DEFAULT_PKEY);
#endif
#ifdef CM_ASSIGN_SERVICE_ID
	LEAK(CM_ASSIGN_SERVICE_ID);
#endif
#ifdef REC_TYPE_IB
	LEAK(REC_TYPE_IB);
#endif
#ifdef REC_TYPE_ROCE_V1
	LEAK(REC_TYPE_ROCE_V1);
#endif
#ifdef REC_TYPE_ROCE_V2
	LEAK(REC_TYPE_ROCE_V2);
#endif
#ifdef ATTR_COUNT
	LEAK(ATTR_COUNT);
#endif
#ifdef LID_PERMISSIVE
	LEAK(LID_PERMISSIVE);
#endif
#ifdef MAX_LOOP_INDEX
	LEAK(MAX_LOOP_INDEX);
#endif
#ifdef REQ_PRIVATE_DATA_SIZE
	LEAK(REQ_PRIVATE_DATA_SIZE);
#endif
#ifdef DREQ_PRIVATE_DATA_SIZE
	LEAK(DREQ_PRIVATE_DATA_SIZE);
#endif
#ifdef DREP_PRIVATE_DATA_SIZE
	LEAK(DREP_PRIVATE_DATA_SIZE);
#endif
#ifdef REJ_ARI_LENGTH
	LEAK(REJ_ARI_LENGTH);
#endif
	if (leaked) {
		printf("FAIL: %d non-kernel, non-ibcm_ macros in <rdma/ib_cm.h>\n", leaked);
		return 1;
	}
	puts("header namespace: OK");
	return 0;
}
