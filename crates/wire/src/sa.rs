//! Subnet administration MADs (IBA 15.2): the class, the methods and the
//! PathRecord attribute's place in a SubnAdmGet, as the kernel's
//! `sa_query.c` and OpenSM use them.

/// `IB_MGMT_CLASS_SUBN_ADM`.
pub const MGMT_CLASS_SA: u8 = 0x03;
/// `IB_SA_CLASS_VERSION`.
pub const SA_CLASS_VERSION: u8 = 2;
/// `IB_MGMT_METHOD_GET`: SubnAdmGet.
pub const METHOD_GET: u8 = 0x01;
/// `IB_MGMT_METHOD_GET_RESP`: the SA's answer to a SubnAdmGet.
pub const METHOD_GET_RESP: u8 = 0x81;
/// `IB_SA_METHOD_GET_TABLE`: SubnAdmGetTable.
pub const METHOD_GET_TABLE: u8 = 0x12;
/// `IB_SA_ATTR_PATH_REC`.
pub const ATTR_PATH_RECORD: u16 = 0x0035;
/// Where an SA MAD's component mask starts (after the MAD header, the RMPP
/// header, SM_Key and the attribute offset).
pub const COMP_MASK_OFFSET: usize = 48;
/// Where an SA MAD's attribute (the PathRecord) starts.
pub const RECORD_OFFSET: usize = 56;
/// `IB_MGMT_MAD_STATUS_BUSY`: the Busy bit of the common MAD status (IBA
/// 13.4.7): the SA dropped the query, ask again later; not a verdict on the
/// path.
pub const MAD_STATUS_BUSY: u16 = 0x0001;
