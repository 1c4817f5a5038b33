//! `IBCM_PCAP=<file>`: every CM MAD this process sends or receives, on any
//! transport, written to a pcap file as the RoCE v2 packet that carries it
//! (Ethernet, IPv6 with the GIDs as addresses, UDP port 4791, BTH, DETH, MAD,
//! ICRC), so tshark and Wireshark dissect it as InfiniBand CM. Each packet is
//! one `write(2)`: a crash loses at most the packet in flight.
//!
//! The file must not exist yet: the library creates it, mode 0600, and never
//! follows a symlink or truncates a file there (one error is logged instead
//! and nothing is captured).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use crate::ibcm_log;
use crate::wire::{MAD_SIZE, Mad};

const LINKTYPE_ETHERNET: u32 = 1;
const ROCE_V2_PORT: u16 = 4791;
/// BTH opcode: UD SEND Only.
const UD_SEND_ONLY: u8 = 0x64;
use crate::wire::QP1_QKEY;
/// UDP payload: BTH (12) + DETH (8) + MAD + ICRC (4).
const UDP_PAYLOAD: usize = 12 + 8 + MAD_SIZE + 4;

/// The capture `IBCM_PCAP` asks for, decided once.
enum Capture {
    Off,
    On(Mutex<File>),
    /// The file could not be created: why, logged once after initialisation
    /// (never inside it: a panic there would poison the lock for good).
    Failed(String),
}

static CAPTURE: OnceLock<Capture> = OnceLock::new();

/// The capture file, if capturing is on.
fn capture() -> Option<&'static Mutex<File>> {
    static REPORTED: AtomicBool = AtomicBool::new(false);
    match CAPTURE.get_or_init(capture_from_env) {
        Capture::On(file) => Some(file),
        Capture::Failed(why) => {
            if !REPORTED.swap(true, Ordering::Relaxed) {
                ibcm_log!(Error, "{why}");
            }
            None
        }
        Capture::Off => None,
    }
}

/// `IBCM_PCAP`, read with `secure_getenv`: a set-user-ID process does not
/// write where its caller says.
fn capture_from_env() -> Capture {
    let Some(path) = crate::os::sys::secure_var_os(c"IBCM_PCAP") else {
        return Capture::Off;
    };
    match create(Path::new(&path)) {
        Ok(file) => Capture::On(Mutex::new(file)),
        Err(e) => Capture::Failed(format!(
            "IBCM_PCAP: cannot create {}: {e} (the capture must be a new file)",
            path.to_string_lossy()
        )),
    }
}

/// Creates the capture and writes the pcap header. The file must not exist
/// (`O_CREAT|O_EXCL`, so neither an existing file nor a symlink, even a
/// dangling one, is followed or truncated; `O_NOFOLLOW` besides) and is
/// readable by its owner only: it holds every MAD's private data.
fn create(path: &Path) -> std::io::Result<File> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
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

/// Whether capturing is on (`IBCM_PCAP` set and the file created).
pub fn enabled() -> bool {
    capture().is_some()
}

/// Records a MAD going from `sgid` to `dgid`.
pub fn record(sgid: &[u8; 16], dgid: &[u8; 16], mad: &Mad) {
    let Some(pcap) = capture() else {
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

    /// A fresh directory for one test (removed by the test).
    fn scratch_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ibcm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir(&dir).unwrap();
        dir
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn pcap_is_a_new_private_file() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch_dir("pcap-new");
        let path = dir.join("capture.pcap");
        drop(create(&path).unwrap());
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(meta.len(), 24); // the pcap header
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    #[cfg_attr(miri, ignore)]
    fn pcap_refuses_an_existing_file_and_a_symlink() {
        let dir = scratch_dir("pcap-refuse");
        let existing = dir.join("existing.pcap");
        std::fs::write(&existing, b"keep me").unwrap();
        let e = create(&existing).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
        assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");

        let target = dir.join("target");
        std::fs::write(&target, b"precious").unwrap();
        let link = dir.join("link.pcap");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(create(&link).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");

        let dangling = dir.join("dangling.pcap");
        std::os::unix::fs::symlink(dir.join("nowhere"), &dangling).unwrap();
        assert!(create(&dangling).is_err());
        assert!(!dir.join("nowhere").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
