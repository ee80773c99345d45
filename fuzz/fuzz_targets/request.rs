//! Feeds arbitrary bytes to the request path a connection runs before any handler: frame check,
//! header prefix, request header, then the typed request decoder for the advertised
//! (api key, version). None may panic or allocate from a count read out of the input.
#![no_main]

use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use libfuzzer_sys::fuzz_target;
use sluice::api::{decode_request, versions};
use sluice::protocol::frame::{check_frame, decode_request_header, peek_header_prefix, FrameCheck};

fuzz_target!(|data: &[u8]| {
    let FrameCheck::Complete { len } = check_frame(data, 1 << 20) else { return };
    let mut body = Bytes::copy_from_slice(&data[4..4 + len]);
    let Ok(prefix) = peek_header_prefix(&body) else { return };
    let Ok(key) = ApiKey::try_from(prefix.api_key) else { return };
    if !versions::is_supported(key, prefix.api_version) {
        return;
    }
    if decode_request_header(&mut body, key, prefix.api_version).is_ok() {
        let _ = decode_request(key, prefix.api_version, body);
    }
});
