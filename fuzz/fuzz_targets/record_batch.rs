//! Feeds arbitrary bytes to every record-batch parser and validator. None may panic, loop
//! forever or allocate from a length read out of the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::protocol::record_batch::{
    crc_is_valid, find_max_timestamp_record, find_offset_for_timestamp, validate_produce_records, BatchHeader,
    BatchIter, RecordIter,
};

fuzz_target!(|data: &[u8]| {
    let _ = BatchHeader::parse(data);
    let _ = validate_produce_records(data, 1 << 20);
    let mut iter = BatchIter::new(data);
    for item in iter.by_ref() {
        let Ok((header, batch)) = item else { break };
        assert_eq!(header.total_size(), batch.len());
        let _ = crc_is_valid(batch);
        let _ = find_offset_for_timestamp(batch, header.base_timestamp);
        let _ = find_max_timestamp_record(batch);
        if let Ok(records) = RecordIter::new(batch) {
            for r in records.take(1 << 16) {
                if r.is_err() {
                    break;
                }
            }
        }
    }
    assert!(iter.remainder().len() <= data.len());
});
