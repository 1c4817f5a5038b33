//! The PathRecord attribute (IBA 15.2.5.16) and the SubnAdmGet that asks
//! for it: a query's MAD, a record's bytes both ways, and an answer's status
//! as an errno.

use ib_cm_wire::errno::{CmResult, EBUSY, EINVAL, Errno};
use ib_cm_wire::sa::{
    ATTR_PATH_RECORD, COMP_MASK_OFFSET, MAD_STATUS_BUSY, METHOD_GET, MGMT_CLASS_SA,
    RECORD_OFFSET as DATA_OFFSET, SA_CLASS_VERSION,
};
use ib_cm_wire::{MAD_SIZE, Mad};

use crate::path::{Path, REC_TYPE_IB};

/// The PathRecord attribute's size.
pub const RECORD_SIZE: usize = 64;

/// `IB_SA_PATH_REC_*`: the component mask bits of a PathRecord query.
///
/// `IB_SA_PATH_REC_SERVICE_ID`: the service ID (its two mask bits, the
/// record's ServiceID being two fields in the IBA's table).
pub const COMP_SERVICE_ID: u64 = (1 << 0) | (1 << 1);
/// `IB_SA_PATH_REC_DGID`: the destination GID.
pub const COMP_DGID: u64 = 1 << 2;
/// `IB_SA_PATH_REC_SGID`: the source GID.
pub const COMP_SGID: u64 = 1 << 3;
/// `IB_SA_PATH_REC_DLID`: the destination LID.
pub const COMP_DLID: u64 = 1 << 4;
/// `IB_SA_PATH_REC_SLID`: the source LID.
pub const COMP_SLID: u64 = 1 << 5;
/// `IB_SA_PATH_REC_REVERSIBLE`: the Reversible bit.
pub const COMP_REVERSIBLE: u64 = 1 << 11;
/// `IB_SA_PATH_REC_NUMB_PATH`: how many paths are asked for.
pub const COMP_NUMB_PATH: u64 = 1 << 12;
/// `IB_SA_PATH_REC_PKEY`: the partition key.
pub const COMP_PKEY: u64 = 1 << 13;

/// A PathRecord query: the record's given fields and which of them count.
#[derive(Debug, Clone, Copy)]
pub struct PathQuery {
    /// The record's fields the CM's `Path` carries.
    pub rec: Path,
    /// The record's fields it does not.
    pub extras: QueryExtras,
    /// Which fields count: `COMP_*` bits.
    pub comp_mask: u64,
}

/// The fields of a query's record that the CM's `Path` does not carry:
/// `struct sa_path_rec`'s selectors, QoS class, preference and raw traffic
/// bit, which a caller of `ib_sa_path_rec_get` may ask with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueryExtras {
    /// `raw_traffic`: 1 bit.
    pub raw_traffic: u8,
    /// `qos_class`: 12 bits.
    pub qos_class: u16,
    /// `mtu_selector`: 2 bits (`IB_SA_GT`, `_LT`, `_EQ`, `_BEST`).
    pub mtu_selector: u8,
    /// `rate_selector`: 2 bits, as `mtu_selector`.
    pub rate_selector: u8,
    /// `packet_life_time_selector`: 2 bits, as `mtu_selector`.
    pub packet_life_time_selector: u8,
    /// `preference`: which of several paths the SA prefers.
    pub preference: u8,
}

impl PathQuery {
    /// What `ibcm_init_path` asks for, like rdma_cm's `cma_query_ib_route`:
    /// one reversible path from `sgid` to `dgid` in partition `pkey`.
    pub fn between(sgid: [u8; 16], dgid: [u8; 16], pkey: u16) -> Self {
        PathQuery {
            rec: Path {
                sgid,
                dgid,
                pkey,
                reversible: 1,
                numb_path: 1,
                ..Path::default()
            },
            extras: QueryExtras::default(),
            comp_mask: COMP_DGID | COMP_SGID | COMP_PKEY | COMP_NUMB_PATH | COMP_REVERSIBLE,
        }
    }

    /// The SubnAdmGet(PathRecord) MAD with TID `tid`.
    pub fn encode(&self, tid: u32) -> Mad {
        let mut mad = [0u8; MAD_SIZE];
        mad[0] = 1; // base version
        mad[1] = MGMT_CLASS_SA;
        mad[2] = SA_CLASS_VERSION;
        mad[3] = METHOD_GET;
        mad[12..16].copy_from_slice(&tid.to_be_bytes());
        mad[16..18].copy_from_slice(&ATTR_PATH_RECORD.to_be_bytes());
        mad[COMP_MASK_OFFSET..DATA_OFFSET].copy_from_slice(&self.comp_mask.to_be_bytes());
        mad[DATA_OFFSET..DATA_OFFSET + RECORD_SIZE].copy_from_slice(&self.record_bytes());
        mad
    }

    /// The PathRecord this query sends: its given fields and extras as they
    /// go on the wire. With the component mask, all that tells one query
    /// from another (the path cache's key).
    pub fn record_bytes(&self) -> [u8; RECORD_SIZE] {
        let mut record = [0u8; RECORD_SIZE];
        encode_record(&self.rec, &mut record);
        encode_extras(&self.extras, &mut record);
        record
    }
}

/// Writes `p` as a PathRecord (64 bytes, big-endian bit fields).
pub fn encode_record(p: &Path, out: &mut [u8]) {
    out[0..8].copy_from_slice(&p.service_id.to_be_bytes());
    out[8..24].copy_from_slice(&p.dgid);
    out[24..40].copy_from_slice(&p.sgid);
    out[40..42].copy_from_slice(&p.dlid.to_be_bytes());
    out[42..44].copy_from_slice(&p.slid.to_be_bytes());
    let flow_hop = ((p.flow_label & 0xf_ffff) << 8) | u32::from(p.hop_limit);
    out[44..48].copy_from_slice(&flow_hop.to_be_bytes());
    out[48] = p.traffic_class;
    out[49] = (p.reversible << 7) | (p.numb_path & 0x7f);
    out[50..52].copy_from_slice(&p.pkey.to_be_bytes());
    out[52..54].copy_from_slice(&u16::from(p.sl & 0xf).to_be_bytes());
    out[54] = p.mtu & 0x3f;
    out[55] = p.rate & 0x3f;
    out[56] = p.packet_life_time & 0x3f;
}

/// Adds what `extras` holds to a record `encode_record` wrote: the bits
/// it leaves zero (raw traffic, QoS class, the selectors, preference).
fn encode_extras(x: &QueryExtras, out: &mut [u8]) {
    out[44] |= (x.raw_traffic & 1) << 7;
    out[52] |= ((x.qos_class & 0xfff) >> 4) as u8;
    out[53] |= ((x.qos_class & 0xf) << 4) as u8;
    out[54] |= (x.mtu_selector & 3) << 6;
    out[55] |= (x.rate_selector & 3) << 6;
    out[56] |= (x.packet_life_time_selector & 3) << 6;
    out[57] = x.preference;
}

/// Reads a PathRecord as the kernel's `ib_sa_unpack_path` does (an IB
/// record: `rec_type` IB, the LIDs in the IB part).
pub fn decode_record(r: &[u8]) -> Path {
    let be16 = |i: usize| u16::from_be_bytes([r[i], r[i + 1]]);
    let flow_hop = u32::from_be_bytes([r[44], r[45], r[46], r[47]]);
    Path {
        service_id: u64::from_be_bytes(r[0..8].try_into().unwrap_or_default()),
        dgid: r[8..24].try_into().unwrap_or_default(),
        sgid: r[24..40].try_into().unwrap_or_default(),
        dlid: be16(40),
        slid: be16(42),
        flow_label: (flow_hop >> 8) & 0xf_ffff,
        hop_limit: flow_hop as u8,
        traffic_class: r[48],
        reversible: r[49] >> 7,
        numb_path: r[49] & 0x7f,
        pkey: be16(50),
        sl: (be16(52) & 0xf) as u8,
        mtu: r[54] & 0x3f,
        rate: r[55] & 0x3f,
        packet_life_time: r[56] & 0x3f,
        rec_type: REC_TYPE_IB,
    }
}

/// `-EBUSY`: the SA answered with the MAD status bit Busy
/// (`IB_MGMT_MAD_STATUS_BUSY`, IBA 13.4.7: the request was discarded, ask
/// again later). A path cache backs off and asks again; what the kernel's
/// SA client reports for it is `-EINVAL`.
pub const BUSY: Errno = EBUSY;

/// The common MAD status of an SA answer (0: success).
pub fn status(mad: &Mad) -> u16 {
    u16::from_be_bytes([mad[4], mad[5]])
}

/// The status of an SA answer as an errno: 0, [`BUSY`], or `-EINVAL` for
/// any other error status (the SA's reason is in the MAD, not in the errno).
pub fn status_errno(mad: &Mad) -> CmResult {
    let status = status(mad);
    if status == 0 {
        Ok(())
    } else if status & MAD_STATUS_BUSY != 0 {
        Err(BUSY)
    } else {
        Err(EINVAL)
    }
}

/// The PathRecord of a SubnAdmGetResp, or the errno of its status
/// ([`status_errno`]).
pub fn decode_response(mad: &Mad) -> CmResult<Path> {
    status_errno(mad)?;
    Ok(decode_record(&mad[DATA_OFFSET..DATA_OFFSET + RECORD_SIZE]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gid(last: u8) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = last;
        g
    }

    #[test]
    fn a_path_query_is_the_subnadmget_the_kernel_sends() {
        let q = PathQuery::between(gid(1), gid(4), 0xffff);
        let mad = q.encode(0x1234_5678);
        assert_eq!(mad[..4], [1, 0x03, 2, 0x01]);
        assert_eq!(mad[12..16], [0x12, 0x34, 0x56, 0x78]);
        assert_eq!(mad[16..18], [0x00, 0x35]);
        // DGID | SGID | REVERSIBLE | NUMB_PATH | PKEY
        assert_eq!(mad[48..56], [0, 0, 0, 0, 0, 0, 0x38, 0x0c]);
        assert_eq!(mad[56 + 8..56 + 24], gid(4));
        assert_eq!(mad[56 + 24..56 + 40], gid(1));
        assert_eq!(mad[56 + 49], 0x81); // reversible, one path
        assert_eq!(mad[56 + 50..56 + 52], [0xff, 0xff]);
    }

    #[test]
    fn selectors_and_qos_class_go_where_the_kernels_ib_pack_puts_them() {
        let mut q = PathQuery::between(gid(1), gid(4), 0xffff);
        q.rec.sl = 5;
        q.rec.mtu = 4;
        q.extras = QueryExtras {
            raw_traffic: 1,
            qos_class: 0xabc,
            mtu_selector: 2,
            rate_selector: 3,
            packet_life_time_selector: 1,
            preference: 7,
        };
        let r = &q.encode(1)[56..];
        assert_eq!(r[44] & 0x80, 0x80);
        assert_eq!(r[52..54], [0xab, 0xc5]);
        assert_eq!(r[54], 0x84);
        assert_eq!(r[55] >> 6, 3);
        assert_eq!(r[56] >> 6, 1);
        assert_eq!(r[57], 7);
    }

    #[test]
    fn a_path_record_reads_back_as_written() {
        let p = Path {
            service_id: 0x1122_3344_5566_7788,
            dgid: gid(4),
            sgid: gid(1),
            dlid: 4,
            slid: 2,
            flow_label: 0xabcde,
            hop_limit: 0,
            traffic_class: 0x20,
            reversible: 1,
            numb_path: 1,
            pkey: 0xffff,
            sl: 3,
            mtu: 4,
            rate: 3,
            packet_life_time: 18,
            rec_type: REC_TYPE_IB,
        };
        let mut r = [0u8; 64];
        encode_record(&p, &mut r);
        assert_eq!(decode_record(&r), p);
    }

    #[test]
    fn an_error_status_is_einval_as_in_the_kernel() {
        let mut mad = PathQuery::between(gid(1), gid(9), 0xffff).encode(7);
        mad[3] = 0x81;
        mad[4..6].copy_from_slice(&0x0300u16.to_be_bytes()); // no records
        assert_eq!(decode_response(&mad), Err(EINVAL));
    }

    #[test]
    fn a_busy_status_is_busy_and_a_success_is_the_record() {
        let mut mad = PathQuery::between(gid(1), gid(9), 0xffff).encode(7);
        mad[3] = 0x81;
        assert_eq!(decode_response(&mad).map(|p| p.dgid), Ok(gid(9)));
        mad[4..6].copy_from_slice(&0x0001u16.to_be_bytes());
        assert_eq!(status(&mad), 1);
        assert_eq!(decode_response(&mad), Err(BUSY));
    }
}
