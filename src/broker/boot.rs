//! Has the OS restarted since a log dir was last opened? That decides how much of each active
//! segment startup re-checks ([`ActiveCheck`]).
//!
//! Each log dir holds [`MARKER`]: the kernel's boot id (`/proc/sys/kernel/random/boot_id`, a
//! random UUID per boot) written once a broker has opened, and so checked, every partition in
//! the dir. If the marker equals the current boot id, the OS has run without a restart since
//! then: every byte written to the dir afterwards (by any process) is whole in the page cache or
//! on disk, and a killed broker can only have cut its last write short, which the structural
//! check catches. Anything else (no marker, another boot, no boot id on this platform, an
//! unreadable marker) means a power loss or kernel crash may have torn what the page cache had
//! not written back, and every batch of each active segment has its CRC verified, as Kafka does
//! after an unclean shutdown.
//!
//! After `kill -9` this skips reading every active segment in full (restart time then no longer
//! grows with the data written since the last roll). Kafka gets the same after a clean shutdown
//! from `.kafka_cleanshutdown`; the boot id extends it to crashes of the broker alone.
//!
//! # Failure behaviour
//! A marker that cannot be written is logged (`warn!`) and costs only speed: the next start in
//! this boot verifies CRCs again. A log dir restored from a snapshot taken while the OS that
//! wrote it was still running carries that boot's id; delete the marker before starting on it.
use std::path::Path;

use crate::log::{checkpoint, ActiveCheck, LogError};

/// The marker's file name in each log dir (a file, so partition loading ignores it).
pub const MARKER: &str = ".sluice_boot_id";

const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// This boot's id, if the platform has one.
pub fn current_boot_id() -> Option<String> {
    let id = std::fs::read_to_string(BOOT_ID).ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_string())
}

/// The check for a log dir whose marker reads `marker` (`None`: absent or unreadable).
pub fn check_for(marker: Option<&str>, boot_id: Option<&str>) -> ActiveCheck {
    match (marker.map(str::trim), boot_id) {
        (Some(m), Some(b)) if !b.is_empty() && m == b => ActiveCheck::Structure,
        _ => ActiveCheck::Crc,
    }
}

/// Reads `log_dir`'s marker and decides its check.
pub fn active_check(log_dir: &Path, boot_id: Option<&str>) -> ActiveCheck {
    let marker = std::fs::read_to_string(log_dir.join(MARKER)).ok();
    check_for(marker.as_deref(), boot_id)
}

/// Records that every partition of `log_dir` was opened (and checked) during boot `boot_id`.
///
/// Replaced through a rename but not fsynced: the marker only has to hold within the boot that
/// wrote it, where the page cache is the truth. After an OS crash the boot id changes, so a
/// marker the crash lost (or kept) cannot match anyway, and startup does not wait for a disk
/// that is still writing back what the previous broker left.
pub fn record(log_dir: &Path, boot_id: &str) -> Result<(), LogError> {
    checkpoint::write_replacing(&log_dir.join(MARKER), format!("{boot_id}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_marker_from_this_boot_skips_the_crc_check() {
        let boot = "3f1d2c4e-aaaa-bbbb-cccc-0123456789ab";
        assert_eq!(check_for(Some("3f1d2c4e-aaaa-bbbb-cccc-0123456789ab\n"), Some(boot)), ActiveCheck::Structure);
        assert_eq!(check_for(Some("11111111-aaaa-bbbb-cccc-0123456789ab\n"), Some(boot)), ActiveCheck::Crc);
        assert_eq!(check_for(None, Some(boot)), ActiveCheck::Crc);
        assert_eq!(check_for(Some(boot), None), ActiveCheck::Crc);
        assert_eq!(check_for(Some(""), Some("")), ActiveCheck::Crc);
    }

    #[test]
    fn a_recorded_marker_matches_only_its_boot() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(active_check(dir.path(), Some("boot-a")), ActiveCheck::Crc);
        record(dir.path(), "boot-a").unwrap();
        assert_eq!(active_check(dir.path(), Some("boot-a")), ActiveCheck::Structure);
        assert_eq!(active_check(dir.path(), Some("boot-b")), ActiveCheck::Crc);
    }

    #[test]
    fn this_machine_has_a_boot_id() {
        if cfg!(target_os = "linux") {
            let id = current_boot_id().expect("boot id");
            assert_eq!(current_boot_id().as_deref(), Some(id.as_str()), "stable within a boot");
        }
    }
}
