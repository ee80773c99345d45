//! Test harness: runs the real `sluice` binary on 127.0.0.1:0 with a fresh data dir and talks
//! to it over TCP with kafka-protocol's request/response types.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader, TopicName};
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType};
use kafka_protocol::protocol::{Decodable, Encodable, Request, StrBytes};

pub struct Broker {
    pub child: Child,
    pub addr: String,
    pub dir: tempfile::TempDir,
    /// The `/metrics` address, when started with `metrics.listener=...`.
    pub metrics: Option<String>,
    /// Every WARN line the broker has logged so far.
    warnings: Arc<Mutex<Vec<String>>>,
}

/// A topic name for kafka-protocol requests.
pub fn topic_name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

/// One record for [`encode_batch`].
pub struct Rec {
    pub key: Option<String>,
    pub value: String,
    pub timestamp: i64,
}

/// Encodes `recs` as ONE uncompressed v2 batch; `producer` is (producer id, base sequence) for
/// an idempotent batch.
pub fn encode_batch(recs: &[Rec], producer: Option<(i64, i32)>) -> Bytes {
    let records: Vec<Record> = recs
        .iter()
        .enumerate()
        .map(|(i, r)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: producer.map(|p| p.0).unwrap_or(-1),
            producer_epoch: if producer.is_some() { 0 } else { -1 },
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch whenever offset - sequence changes.
            sequence: producer.map(|p| p.1).unwrap_or(-1) + i as i32,
            timestamp: r.timestamp,
            key: r.key.clone().map(Bytes::from),
            value: Some(Bytes::from(r.value.clone())),
            headers: IndexMap::new(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(&mut buf, &records, &RecordEncodeOptions { version: 2, compression: Compression::None }).unwrap();
    buf.freeze()
}

impl Broker {
    pub fn start(overrides: &[&str]) -> Broker {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, overrides)
    }

    pub fn start_in(dir: tempfile::TempDir, overrides: &[&str]) -> Broker {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluice"));
        cmd.arg("serve")
            .arg("--override")
            .arg(format!("log.dirs={}", dir.path().join("data").display()))
            .arg("--override")
            .arg("listeners=PLAINTEXT://127.0.0.1:0");
        for o in overrides {
            cmd.arg("--override").arg(o);
        }
        cmd.stderr(Stdio::piped()).stdout(Stdio::null()).env("SLUICE_LOG", "warn");
        let mut child = cmd.spawn().expect("start sluice");
        let stderr = child.stderr.take().unwrap();
        let mut lines = BufReader::new(stderr).lines();
        let mut metrics = None;
        let warnings = Arc::new(Mutex::new(Vec::new()));
        let keep = {
            let warnings = Arc::clone(&warnings);
            move |line: &str| {
                if line.contains(" WARN ") {
                    warnings.lock().unwrap().push(line.to_string());
                }
            }
        };
        let addr = loop {
            let line = lines.next().expect("sluice exited before listening").unwrap();
            keep(&line);
            if let Some(rest) = line.split("sluice metrics listening on http://").nth(1) {
                metrics = Some(rest.trim().to_string());
            }
            if let Some(rest) = line.split("listening on PLAINTEXT://").nth(1) {
                break rest.trim().to_string();
            }
        };
        // Keep draining stderr so the broker never blocks on a full pipe.
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| keep(&l)));
        Broker { child, addr, dir, metrics, warnings }
    }

    /// The WARN lines logged so far (the broker runs with `SLUICE_LOG=warn`).
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().unwrap().clone()
    }

    pub fn connect(&self) -> Client {
        Client::connect_to(&self.addr)
    }

    /// SIGKILL (no clean shutdown); returns the data dir for a restart.
    pub fn kill9(mut self) -> tempfile::TempDir {
        let _ = self.child.kill();
        let _ = self.child.wait();
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }

    /// SIGTERM and wait for the clean shutdown; returns the data dir for a restart.
    pub fn stop(mut self) -> tempfile::TempDir {
        let pid = self.child.id() as i32;
        let _ = Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "clean shutdown failed: {status:?}");
        std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap())
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Client {
    pub stream: TcpStream,
    correlation: i32,
}

impl Client {
    pub fn connect_to(addr: &str) -> Client {
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        Client { stream: s, correlation: 0 }
    }

    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
    }

    /// Reads one response frame; None if the broker closed the connection.
    pub fn read_frame(&mut self) -> Option<Bytes> {
        let mut size = [0u8; 4];
        if self.stream.read_exact(&mut size).is_err() {
            return None;
        }
        let len = i32::from_be_bytes(size) as usize;
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).ok()?;
        Some(Bytes::from(body))
    }

    /// True when the broker closed the connection (EOF or reset) within the read timeout.
    pub fn is_closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.stream.read(&mut b), Ok(0) | Err(_))
    }

    pub fn encode<R: Request>(&mut self, req: &R, version: i16) -> BytesMut {
        self.correlation += 1;
        let header = RequestHeader::default()
            .with_request_api_key(R::KEY)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation)
            .with_client_id(Some(StrBytes::from_static_str("sluice-tests")));
        let mut buf = BytesMut::new();
        buf.put_i32(0);
        header.encode(&mut buf, R::header_version(version)).unwrap();
        req.encode(&mut buf, version).unwrap();
        let n = (buf.len() - 4) as i32;
        buf[0..4].copy_from_slice(&n.to_be_bytes());
        buf
    }

    pub fn call<R: Request>(&mut self, req: &R, version: i16) -> R::Response {
        let buf = self.encode(req, version);
        self.send_raw(&buf);
        let mut frame = self.read_frame().expect("connection closed");
        let key = ApiKey::try_from(R::KEY).unwrap();
        let header = ResponseHeader::decode(&mut frame, key.response_header_version(version)).unwrap();
        assert_eq!(header.correlation_id, self.correlation);
        let resp = R::Response::decode(&mut frame, version).unwrap();
        assert_eq!(frame.remaining(), 0, "trailing bytes in response");
        resp
    }
}

/// A port nothing listens on, for a process a test starts with a fixed port (a quorum's voters
/// must know each other's ports before any of them runs). Taken from below the kernel's
/// ephemeral range: a port bind(0) hands out is an ephemeral one, and in the seconds before the
/// process binds it an outgoing connection of another test can be given the same port, failing
/// the start with "Address already in use". No port is handed out twice by one test process.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32768)
        .min(32768);
    let (low, span) = (10_000u32, ephemeral_low.saturating_sub(10_000).max(1));
    // Processes started together begin at different places.
    let _ = NEXT.compare_exchange(0, std::process::id().wrapping_mul(7919) % span + 1, Ordering::AcqRel, Ordering::Acquire);
    for _ in 0..span {
        let port = (low + NEXT.fetch_add(1, Ordering::AcqRel) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port below the ephemeral range ({low}..{ephemeral_low})");
}
