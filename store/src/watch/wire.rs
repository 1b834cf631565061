//! Watch responses as pre-encoded protobuf pieces, so an event is encoded once per revision and
//! shared by every watcher that receives it.
//!
//! A protobuf message is the concatenation of its encoded fields, in any order, and a repeated
//! message field is one length-delimited record per element. So a `WatchResponse` for one watcher
//! is: the revision's encoded header (shared), the watcher's `watch_id`, maybe `fragment`, then
//! the encoded `events` records (shared). [`Wire`] holds those pieces as reference-counted
//! [`Bytes`] and writes them out back to back; gRPC clients decode an ordinary `WatchResponse`.

use bytes::{BufMut, Bytes};
use keel_proto::etcdserverpb::{ResponseHeader, WatchResponse};
use keel_proto::mvccpb::Event;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, DecodeContext, WireType};
use prost::Message;

/// `WatchResponse` field numbers (etcd's rpc.proto).
const HEADER: u32 = 1;
const WATCH_ID: u32 = 2;
const FRAGMENT: u32 = 7;
const EVENTS: u32 = 11;

/// An encoded `WatchResponse`, as pieces.
#[derive(Debug, Clone, Default)]
pub struct Wire {
    parts: Vec<Bytes>,
    len: usize,
}

impl Wire {
    /// A whole message encoded in one piece (control responses: created, canceled, progress).
    pub fn message(m: &WatchResponse) -> Wire {
        let b = Bytes::from(m.encode_to_vec());
        Wire { len: b.len(), parts: vec![b] }
    }

    /// An event response: shared header, this watcher's id, optionally `fragment`, no events yet.
    pub fn events(header: &Bytes, watch_id: i64, fragment: bool) -> Wire {
        let mut w = Wire::default();
        w.push(header.clone());
        if watch_id != 0 {
            w.push(varint_field(WATCH_ID, watch_id as u64));
        }
        if fragment {
            w.push(varint_field(FRAGMENT, 1));
        }
        w
    }

    pub fn push(&mut self, part: Bytes) {
        self.len += part.len();
        self.parts.push(part);
    }

    /// The encoded length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pieces joined (tests and debugging).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for p in &self.parts {
            v.extend_from_slice(p);
        }
        v
    }
}

impl Message for Wire {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        for p in &self.parts {
            buf.put_slice(p);
        }
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl bytes::Buf,
        ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        // Never decoded by keel; skipping keeps a stray decode well-formed.
        prost::encoding::skip_field(wire_type, tag, buf, ctx)
    }

    fn encoded_len(&self) -> usize {
        self.len
    }

    fn clear(&mut self) {
        self.parts.clear();
        self.len = 0;
    }
}

fn varint_field(tag: u32, v: u64) -> Bytes {
    let mut b = Vec::with_capacity(11);
    encode_key(tag, WireType::Varint, &mut b);
    encode_varint(v, &mut b);
    b.into()
}

fn message_field(tag: u32, m: &impl Message) -> Bytes {
    let len = m.encoded_len();
    let mut b = Vec::with_capacity(len + 1 + encoded_len_varint(len as u64));
    encode_key(tag, WireType::LengthDelimited, &mut b);
    encode_varint(len as u64, &mut b);
    m.encode_raw(&mut b);
    b.into()
}

/// The `header` field of a response.
pub fn header_field(h: &ResponseHeader) -> Bytes {
    message_field(HEADER, h)
}

/// One element of the `events` field.
pub fn event_field(e: &Event) -> Bytes {
    message_field(EVENTS, e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_proto::mvccpb::KeyValue;

    #[test]
    fn pieces_decode_as_one_watch_response() {
        let h = ResponseHeader { cluster_id: 1, member_id: 2, revision: 7, raft_term: 3 };
        let e1 = Event {
            kv: Some(KeyValue { key: "a".into(), mod_revision: 7, ..Default::default() }),
            ..Default::default()
        };
        let e2 = Event { r#type: 1, kv: Some(KeyValue { key: "b".into(), ..Default::default() }), prev_kv: None };
        let mut w = Wire::events(&header_field(&h), -1, true);
        w.push(event_field(&e1));
        w.push(event_field(&e2));
        let want =
            WatchResponse { header: Some(h), watch_id: -1, fragment: true, events: vec![e1, e2], ..Default::default() };
        assert_eq!(WatchResponse::decode(w.to_vec().as_slice()).unwrap(), want);
        assert_eq!(w.len(), want.encoded_len());
    }
}
