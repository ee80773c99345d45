//! Feeds arbitrary bytes to the KRaft metadata record decoder, alone and as the records of a
//! metadata log, and re-encodes whatever decodes: a peer's or a Kafka log's bytes must never
//! make a node panic or allocate from a count read out of them, and a decoded record must encode
//! back to bytes that decode to the same record.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice::cluster::image::MetadataImage;
use sluice::cluster::records::{decode, decode_batches, encode};

fuzz_target!(|data: &[u8]| {
    if let Ok(rec) = decode(data, 0) {
        let again = decode(&encode(&rec), 0).expect("a re-encoded record decodes");
        assert_eq!(again, rec);
        let mut image = MetadataImage::default();
        let _ = image.apply(0, &rec.record);
    }
    let mut image = MetadataImage::default();
    let _ = decode_batches(data, |offset, _, rec| image.apply(offset, &rec.record));
});
