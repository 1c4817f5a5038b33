//! `Device::query_path` against the tests' fake SA at the in-process
//! fabric's SM LID (`sa::tests::FakeSa`): what it sends, that each call
//! is one query, and its errors.

use crate::sa::tests::{Answer, FakeSa, SA_TESTS};
use crate::{Device, PathQuery};

fn device() -> Device {
    Device::open(&crate::cm::tests::loop_name()).unwrap()
}

/// The fields set go to the SA under their component mask bits (the fake
/// SA answers the record it was sent, with DLID 7), and the answer is the
/// caller's; the same query again is asked again (no cache: the kernel's
/// `ib_sa_path_rec_get`).
#[test]
#[cfg_attr(miri, ignore)]
fn a_query_sends_its_fields_and_each_call_asks_the_sa() {
    let _serial = SA_TESTS.lock();
    let sa = FakeSa::open(Answer::Record);
    let a = device();
    let dgid = crate::Gid(
        crate::transport::loopback::LoopIdentity::from_lid(3333)
            .unwrap()
            .gid,
    );
    let query = PathQuery::between(a.gid(1, 0).unwrap(), dgid)
        .pkey(0x8001)
        .service_id(0x1122_3344_5566_7788)
        .sl(19);
    let mask = query.component_mask();
    for bit in [0, 1, 2, 3, 11, 12, 13, 15] {
        assert_ne!(mask & (1 << bit), 0, "bit {bit} of {mask:#x}");
    }
    assert_eq!(mask & !0b1011_1000_0000_1111, 0, "{mask:#x}");
    let path = a.query_path(1, &query).unwrap();
    assert_eq!(path.dlid(), 7);
    assert_eq!(path.pkey(), 0x8001);
    assert_eq!(path.sl(), 3, "an SL is 4 bits");
    assert_eq!(path.dgid(), dgid);
    assert_eq!(sa.queries(), 1);
    a.query_path(1, &query).unwrap();
    assert_eq!(sa.queries(), 2, "not cached");
}

/// An SA's error status is EINVAL, as the kernel reports any; no SA at
/// all is ETIMEDOUT after the tries; a port that does not exist, EINVAL.
#[test]
#[cfg_attr(miri, ignore)]
fn errors_are_the_kernels() {
    let _serial = SA_TESTS.lock();
    let a = device();
    let query = PathQuery::between(a.gid(1, 0).unwrap(), crate::Gid([0xfe; 16]));
    {
        let _sa = FakeSa::open(Answer::NoRecords);
        assert_eq!(a.query_path(1, &query).unwrap_err().errno(), libc::EINVAL);
    }
    assert_eq!(
        a.query_path(1, &query).unwrap_err().errno(),
        libc::ETIMEDOUT
    );
    assert_eq!(a.query_path(9, &query).unwrap_err().errno(), libc::EINVAL);
}
