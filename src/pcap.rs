//! `IBCM_PCAP=<file>`: every CM MAD this process sends or receives, on any
//! transport, written to a pcap file as the RoCE v2 packet that carries it
//! (Ethernet, IPv6 with the GIDs as addresses, UDP port 4791, BTH, DETH, MAD,
//! ICRC), so tshark and Wireshark dissect it as InfiniBand CM. Each packet is
//! one `write(2)`: a crash loses at most the packet in flight.

use std::fs::File;
use std::io::Write;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::ibcm_log;
use crate::wire::{MAD_SIZE, Mad};

const LINKTYPE_ETHERNET: u32 = 1;
const ROCE_V2_PORT: u16 = 4791;
/// BTH opcode: UD SEND Only.
const UD_SEND_ONLY: u8 = 0x64;
const QP1_QKEY: u32 = 0x8001_0000;
/// UDP payload: BTH (12) + DETH (8) + MAD + ICRC (4).
const UDP_PAYLOAD: usize = 12 + 8 + MAD_SIZE + 4;

static PCAP: LazyLock<Option<Mutex<File>>> = LazyLock::new(|| {
    let path = std::env::var_os("IBCM_PCAP")?;
    match open(&path) {
        Ok(file) => Some(Mutex::new(file)),
        Err(e) => {
            ibcm_log!(
                Error,
                "IBCM_PCAP: cannot write {}: {e}",
                path.to_string_lossy()
            );
            None
        }
    }
});

fn open(path: &std::ffi::OsStr) -> std::io::Result<File> {
    let mut file = File::create(path)?;
    let mut header = Vec::with_capacity(24);
    header.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    header.extend_from_slice(&2u16.to_le_bytes());
    header.extend_from_slice(&4u16.to_le_bytes());
    header.extend_from_slice(&[0; 8]); // timezone, accuracy
    header.extend_from_slice(&65535u32.to_le_bytes());
    header.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
    file.write_all(&header)?;
    Ok(file)
}

/// Whether capturing is on (`IBCM_PCAP` set and the file opened).
pub fn enabled() -> bool {
    PCAP.is_some()
}

/// Records a MAD going from `sgid` to `dgid`.
pub fn record(sgid: &[u8; 16], dgid: &[u8; 16], mad: &Mad) {
    let Some(pcap) = PCAP.as_ref() else {
        return;
    };
    let packet = roce_v2_packet(sgid, dgid, mad);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut record = Vec::with_capacity(16 + packet.len());
    record.extend_from_slice(&(now.as_secs() as u32).to_le_bytes());
    record.extend_from_slice(&now.subsec_micros().to_le_bytes());
    record.extend_from_slice(&(packet.len() as u32).to_le_bytes());
    record.extend_from_slice(&(packet.len() as u32).to_le_bytes());
    record.extend_from_slice(&packet);
    if let Err(e) = pcap.lock().write_all(&record) {
        ibcm_log!(Warn, "IBCM_PCAP: write failed: {e}");
    }
}

/// The Ethernet frame of a RoCE v2 UD SEND to QP1 carrying `mad`.
fn roce_v2_packet(sgid: &[u8; 16], dgid: &[u8; 16], mad: &Mad) -> Vec<u8> {
    static PSN: AtomicU32 = AtomicU32::new(0);
    let mut p = Vec::with_capacity(14 + 40 + 8 + UDP_PAYLOAD);
    // Ethernet: locally administered MACs; IPv6.
    p.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01]);
    p.extend_from_slice(&0x86ddu16.to_be_bytes());
    // IPv6: version 6, traffic class 0, flow label 0; UDP; hop limit 64.
    let udp_len = (8 + UDP_PAYLOAD) as u16;
    p.extend_from_slice(&[0x60, 0, 0, 0]);
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[17, 64]);
    p.extend_from_slice(sgid);
    p.extend_from_slice(dgid);
    // UDP, checksum filled below.
    let udp_at = p.len();
    p.extend_from_slice(&0xc000u16.to_be_bytes());
    p.extend_from_slice(&ROCE_V2_PORT.to_be_bytes());
    p.extend_from_slice(&udp_len.to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    // BTH: UD SEND Only, default P_Key, destination QP 1, a running PSN.
    let psn = PSN.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
    p.extend_from_slice(&[UD_SEND_ONLY, 0]);
    p.extend_from_slice(&0xffffu16.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 1]);
    p.extend_from_slice(&psn.to_be_bytes());
    // DETH: the GSI Q_Key, source QP 1.
    p.extend_from_slice(&QP1_QKEY.to_be_bytes());
    p.extend_from_slice(&[0, 0, 0, 1]);
    p.extend_from_slice(mad);
    p.extend_from_slice(&[0; 4]); // ICRC, not computed
    let checksum = udp6_checksum(sgid, dgid, &p[udp_at..]);
    p[udp_at + 6..udp_at + 8].copy_from_slice(&checksum.to_be_bytes());
    p
}

/// The UDP checksum over the IPv6 pseudo-header (RFC 8200 §8.1).
fn udp6_checksum(src: &[u8; 16], dst: &[u8; 16], udp: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut add = |bytes: &[u8]| {
        for chunk in bytes.chunks(2) {
            let word = u16::from_be_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]);
            sum += u32::from(word);
        }
    };
    add(src);
    add(dst);
    add(&(udp.len() as u32).to_be_bytes());
    add(&[0, 0, 0, 17]);
    add(udp);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    match !(sum as u16) {
        0 => 0xffff,
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp6_checksum_verifies_to_zero() {
        let (src, dst) = ([1u8; 16], [2u8; 16]);
        let mad = [0x5a; MAD_SIZE];
        let packet = roce_v2_packet(&src, &dst, &mad);
        let udp = &packet[54..];
        // Summing a datagram with its checksum in place gives all ones.
        assert_eq!(udp6_checksum(&src, &dst, udp), 0xffff);
        assert_eq!(&packet[54 + 8 + 20..54 + 8 + 20 + MAD_SIZE], &mad[..]);
    }

    #[test]
    fn lap_and_apr_frames_carry_the_whole_mad() {
        use crate::wire::{Apr, Lap, attr};
        let (src, dst) = ([3u8; 16], [4u8; 16]);
        for (mad, attr_id) in [
            (Lap::default().encode(9), attr::LAP),
            (Apr::default().encode(9), attr::APR),
        ] {
            let packet = roce_v2_packet(&src, &dst, &mad);
            let at = 54 + 8 + 20;
            assert_eq!(&packet[at..at + MAD_SIZE], &mad[..]);
            assert_eq!(packet[at + 16..at + 18], attr_id.to_be_bytes());
        }
    }
}
