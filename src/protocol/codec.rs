//! Big-endian field readers and writers for the records Kafka's coordinators keep in their
//! internal topics (`__consumer_offsets`, `__transaction_state`): classic strings (i16 length,
//! -1 = null) and bytes (i32 length), and the flexible versions' unsigned varints, compact
//! strings and arrays (length + 1) and tagged-field sections.
//!
//! # Failure behaviour
//! A read never panics and never allocates more than the input holds: every length is checked
//! against the bytes left, and a short or malformed input is an error naming what was wanted.

use bytes::{BufMut, Bytes, BytesMut};

/// An unsigned varint (flexible versions' lengths and tags).
pub fn put_uvarint(b: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

/// A compact string: length + 1 as a varint, 0 for null; cut at i16::MAX bytes.
pub fn put_compact_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => {
            let s = &s.as_bytes()[..s.len().min(i16::MAX as usize)];
            put_uvarint(b, s.len() as u32 + 1);
            b.put_slice(s);
        }
        None => put_uvarint(b, 0),
    }
}

/// A classic string: i16 length, then UTF-8; cut at i16::MAX bytes.
pub fn put_str(b: &mut BytesMut, s: &str) {
    // Callers bound strings well below i16::MAX (ids and topics come from decoded requests,
    // whose strings are i16-length-prefixed on the wire too).
    let s = &s.as_bytes()[..s.len().min(i16::MAX as usize)];
    b.put_i16(s.len() as i16);
    b.put_slice(s);
}

/// A classic nullable string (-1 for null).
pub fn put_opt_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        Some(s) => put_str(b, s),
        None => b.put_i16(-1),
    }
}

/// Classic bytes: i32 length, then the bytes.
pub fn put_bytes(b: &mut BytesMut, v: &[u8]) {
    b.put_i32(v.len() as i32);
    b.put_slice(v);
}

/// Reads big-endian fields off a byte slice; every read is checked against what is left.
pub struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader(bytes)
    }
    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.0.len()
    }
    pub fn take(&mut self, n: usize) -> Result<&[u8], String> {
        if self.0.len() < n {
            return Err(format!("need {n} bytes, {} left", self.0.len()));
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }
    pub fn i8(&mut self) -> Result<i8, String> {
        Ok(self.take(1)?[0] as i8)
    }
    pub fn i16(&mut self) -> Result<i16, String> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }
    pub fn i32(&mut self) -> Result<i32, String> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub fn i64(&mut self) -> Result<i64, String> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }
    pub fn opt_string(&mut self) -> Result<Option<String>, String> {
        let n = self.i16()?;
        if n < 0 {
            return Ok(None);
        }
        let b = self.take(n as usize)?;
        String::from_utf8(b.to_vec()).map(Some).map_err(|e| format!("string is not UTF-8: {e}"))
    }
    pub fn string(&mut self) -> Result<String, String> {
        Ok(self.opt_string()?.unwrap_or_default())
    }
    /// An unsigned varint of at most 5 bytes (flexible versions' lengths and tags).
    pub fn uvarint(&mut self) -> Result<u32, String> {
        let mut v: u32 = 0;
        for i in 0..5 {
            let b = self.take(1)?[0];
            v |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 5 bytes".into())
    }
    /// A compact string (length + 1 as a varint; 0 = null, read as empty).
    pub fn compact_string(&mut self) -> Result<String, String> {
        Ok(self.compact_opt_string()?.unwrap_or_default())
    }
    pub fn compact_opt_string(&mut self) -> Result<Option<String>, String> {
        let n = self.uvarint()?;
        if n == 0 {
            return Ok(None);
        }
        let b = self.take(n as usize - 1)?;
        String::from_utf8(b.to_vec()).map(Some).map_err(|e| format!("string is not UTF-8: {e}"))
    }
    /// A compact array's length (a null array reads as empty), bounded by the bytes left so a
    /// corrupt length cannot make the reader allocate.
    pub fn compact_len(&mut self) -> Result<usize, String> {
        let n = self.uvarint()?.saturating_sub(1) as usize;
        if n > self.0.len() {
            return Err(format!("array of {n} elements in {} bytes", self.0.len()));
        }
        Ok(n)
    }
    /// `count` i32s, bounded by the bytes left.
    pub fn i32s(&mut self, count: usize) -> Result<Vec<i32>, String> {
        let mut out = Vec::with_capacity(count.min(self.0.len() / 4));
        for _ in 0..count {
            out.push(self.i32()?);
        }
        Ok(out)
    }
    /// A classic array's length (i32; -1 = null, read as empty), bounded by the bytes left.
    pub fn array_len(&mut self) -> Result<usize, String> {
        let n = self.i32()?.max(0) as usize;
        if n > self.0.len() {
            return Err(format!("array of {n} elements in {} bytes", self.0.len()));
        }
        Ok(n)
    }
    /// Passes over a tagged-field section (none of the tagged fields is needed).
    pub fn skip_tagged_fields(&mut self) -> Result<(), String> {
        for _ in 0..self.uvarint()? {
            let _tag = self.uvarint()?;
            let size = self.uvarint()?;
            self.take(size as usize)?;
        }
        Ok(())
    }
    pub fn bytes(&mut self) -> Result<Bytes, String> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(Bytes::new());
        }
        Ok(Bytes::copy_from_slice(self.take(n as usize)?))
    }
}
