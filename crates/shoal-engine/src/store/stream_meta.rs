//! A streamlet's durable state besides its batches: retention's trim
//! point and the committed offsets of its named consumers
//! (`docs/streams.md`, "Consumer names: one consumer per group").
//!
//! Both live in one object of the stream's table under the streamlet's key
//! (`shoal_common::streamlet_key`), the key whose hash routes the
//! streamlet's requests and places its batches in a recovery partition:
//! whichever master recovers the streamlet's batches recovers this object
//! too. (An object under another key, say the streamlet's key and a
//! consumer's name, would hash to another piece of the stream's tablets
//! and could be recovered by another master.) Client object requests
//! cannot reach a stream's table, so only the server writes it. Every
//! read-modify-write of it holds the streamlet's `meta` lock, so a commit
//! and a retention trim never lose each other's update.
//!
//! Value layout (little-endian), version 2; version 1 is the 8-byte trim
//! point alone, which still decodes (no consumers):
//!
//! ```text
//! trim point u64 | names u16 | names x name
//! name:   length u8 (1-255) | UTF-8 bytes | cursors u16 | cursors x cursor
//! cursor: log u32 | group u64 | segment u32 | position u32     (20 bytes)
//! ```
//!
//! A **cursor** of a consumer name on a log of the MultiLog says where the
//! name reads that log next: the log's first group with an id at least
//! `group`, from (`segment`, `position`) if that group's id is `group`,
//! from its start otherwise. A log without a cursor starts at its first
//! group. A name's cursor on a log moves to the log's next group only when
//! a commit reaches the end of a closed group (see [`Store::commit_consumer`]).

use super::*;
use shoal_common::StreamOffset;
use std::collections::BTreeMap;

/// Most consumer names with committed offsets in one streamlet.
pub const MAX_CONSUMER_NAMES: usize = 32;
/// Longest consumer name, in bytes.
pub const MAX_CONSUMER_NAME: usize = 255;

const TRIM: usize = 8;
const CURSOR: usize = 20;

/// The decoded object: trim point and each name's cursors by log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct StreamletMeta {
    pub trim: u64,
    pub consumers: BTreeMap<String, BTreeMap<u32, StreamOffset>>,
}

impl StreamletMeta {
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(TRIM + 2);
        v.extend_from_slice(&self.trim.to_le_bytes());
        if self.consumers.is_empty() {
            return v;
        }
        v.extend_from_slice(&(self.consumers.len() as u16).to_le_bytes());
        for (name, cursors) in &self.consumers {
            v.push(name.len() as u8);
            v.extend_from_slice(name.as_bytes());
            v.extend_from_slice(&(cursors.len() as u16).to_le_bytes());
            for (log, c) in cursors {
                v.extend_from_slice(&log.to_le_bytes());
                v.extend_from_slice(&c.group.to_le_bytes());
                v.extend_from_slice(&c.segment.to_le_bytes());
                v.extend_from_slice(&c.position.to_le_bytes());
            }
        }
        v
    }

    /// `None` for bytes [`StreamletMeta::encode`] did not write.
    pub fn decode(v: &[u8]) -> Option<StreamletMeta> {
        let mut r = Cursor(v);
        let trim = u64::from_le_bytes(r.take(TRIM)?.try_into().ok()?);
        let mut meta = StreamletMeta { trim, consumers: BTreeMap::new() };
        if r.0.is_empty() {
            return Some(meta);
        }
        let names = r.u16()?;
        for _ in 0..names {
            let len = r.take(1)?[0] as usize;
            let name = std::str::from_utf8(r.take(len)?).ok()?;
            if name.is_empty() {
                return None;
            }
            let n = r.u16()? as usize;
            let mut cursors = BTreeMap::new();
            for c in r.take(n.checked_mul(CURSOR)?)?.chunks_exact(CURSOR) {
                let le4 = |at: usize| u32::from_le_bytes(c[at..at + 4].try_into().expect("4 bytes"));
                let group = u64::from_le_bytes(c[4..12].try_into().expect("8 bytes"));
                cursors.insert(le4(0), StreamOffset { group, segment: le4(12), position: le4(16) });
            }
            meta.consumers.insert(name.to_owned(), cursors);
        }
        r.0.is_empty().then_some(meta)
    }
}

struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }
}

/// Where a consumer name may read a log of a streamlet now: the log's first
/// group at or after the name's cursor ([`Store::consumer_heads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsumerHead {
    pub log: u32,
    pub group: u64,
    /// Where the name reads the group from: its committed offset in it, or
    /// the group's start.
    pub from: StreamOffset,
    pub closed: bool,
    /// The group holds records at or after `from`.
    pub unread: bool,
}

/// What a commit did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Committed {
    /// The offset was the end of a closed group: the name is done with the
    /// group, and its cursor on the group's log is the log's next group.
    pub done: bool,
    /// The version of the streamlet's object written (the server waits for
    /// it to be durable before answering).
    pub version: Version,
}

impl Store {
    /// The streamlet's object, decoded; the default if there is none. The
    /// caller holds the streamlet's `meta` lock when it writes it back.
    fn streamlet_meta(&self, table: TableId, streamlet: u32) -> StreamletMeta {
        let key = shoal_common::streamlet_key(streamlet);
        match self.read(table, &key, RejectRules::default()) {
            // Only the server writes the object: bytes of another shape
            // are treated as no state rather than trusted.
            Ok((v, _)) => StreamletMeta::decode(&v).unwrap_or_default(),
            Err(_) => StreamletMeta::default(),
        }
    }

    fn write_streamlet_meta(
        &self,
        table: TableId,
        streamlet: u32,
        meta: &StreamletMeta,
    ) -> Result<Version, StreamError> {
        let key = shoal_common::streamlet_key(streamlet);
        let value = meta.encode();
        if value.len() > self.inner.config.max_value_bytes {
            return Err(StreamError::Consumers(format!(
                "the committed offsets of streamlet {streamlet} would take {} bytes, more than the largest value ({})",
                value.len(),
                self.inner.config.max_value_bytes
            )));
        }
        self.write(table, &key, &value, RejectRules::default()).map_err(|e| match e {
            StoreError::OutOfMemory => StreamError::OutOfMemory,
            _ => StreamError::UnknownStream(table),
        })
    }

    /// Sets streamlet `streamlet`'s trim point to at least `keep`, keeping
    /// the consumers' offsets; the version written.
    pub(super) fn write_trim_point(&self, table: TableId, streamlet: u32, keep: u64) -> Result<Version, StreamError> {
        let stream = self.inner.stream(table)?;
        let sl = stream.streamlet(streamlet)?;
        let _meta = sl.meta.lock();
        let mut meta = self.streamlet_meta(table, streamlet);
        meta.trim = meta.trim.max(keep);
        self.write_streamlet_meta(table, streamlet, &meta)
    }

    /// The trim point stored in streamlet `streamlet`'s object, if any.
    pub(super) fn stored_trim_point(&self, table: TableId, streamlet: u32) -> Option<u64> {
        let key = shoal_common::streamlet_key(streamlet);
        let (v, _) = self.read(table, &key, RejectRules::default()).ok()?;
        StreamletMeta::decode(&v).map(|m| m.trim)
    }

    /// The committed cursors of consumer `name` on streamlet `streamlet`,
    /// by log (empty: the name never committed here).
    pub fn consumer_cursors(
        &self,
        table: TableId,
        streamlet: u32,
        name: &str,
    ) -> Result<BTreeMap<u32, StreamOffset>, StreamError> {
        self.inner.stream(table)?.streamlet(streamlet)?;
        Ok(self.streamlet_meta(table, streamlet).consumers.remove(name).unwrap_or_default())
    }

    /// For each log of the streamlet, where consumer `name` reads it next
    /// (given its `cursors`, from [`Store::consumer_cursors`]): the log's
    /// first group at or after its cursor. Logs with no such group are
    /// left out. In log order.
    pub fn consumer_heads(
        &self,
        table: TableId,
        streamlet: u32,
        cursors: &BTreeMap<u32, StreamOffset>,
    ) -> Result<Vec<ConsumerHead>, StreamError> {
        let stream = self.inner.stream(table)?;
        let sl = stream.streamlet(streamlet)?;
        let logs = stream.shape.logs;
        let cursor = |log: u32| cursors.get(&log).copied().unwrap_or_default();
        let start = (0..logs).map(|l| cursor(l).group).min().unwrap_or(0);
        let now = self.inner.log.now_ms();
        let mut heads: BTreeMap<u32, ConsumerHead> = BTreeMap::new();
        let groups = sl.groups.read();
        for (id, g) in groups.range(start..) {
            if heads.len() == logs as usize {
                break;
            }
            let g = g.read();
            let c = cursor(g.log);
            if *id < c.group || heads.contains_key(&g.log) {
                continue;
            }
            let from = if *id == c.group { c } else { StreamOffset { group: *id, segment: 0, position: 0 } };
            let unread = g.segments.iter().enumerate().any(|(i, s)| match (i as u32).cmp(&from.segment) {
                std::cmp::Ordering::Less => false,
                std::cmp::Ordering::Equal => s.records > from.position,
                std::cmp::Ordering::Greater => s.records > 0,
            });
            let closed = g.closed || stream.timed_out(&g, now);
            heads.insert(g.log, ConsumerHead { log: g.log, group: *id, from, closed, unread });
        }
        Ok(heads.into_values().collect())
    }

    /// Commits consumer `name`'s offset `at` in a group of log `log` of
    /// the streamlet: its cursor on that log becomes `at`, or the log's
    /// next group when `at` is the end of the group and the group is
    /// closed (the name is done with it). Written to the streamlet's
    /// object; the caller makes the returned version durable before it
    /// answers. Refused past [`MAX_CONSUMER_NAMES`] names, for a name
    /// longer than [`MAX_CONSUMER_NAME`] bytes, and for an offset outside
    /// the group or a group of another log.
    pub fn commit_consumer(
        &self,
        table: TableId,
        streamlet: u32,
        name: &str,
        at: StreamOffset,
    ) -> Result<Committed, StreamError> {
        if name.is_empty() || name.len() > MAX_CONSUMER_NAME {
            return Err(StreamError::Consumers(format!(
                "a consumer name has 1-{MAX_CONSUMER_NAME} bytes, not {}",
                name.len()
            )));
        }
        let stream = self.inner.stream(table)?;
        let sl = stream.streamlet(streamlet)?;
        let group = sl.group(streamlet, at.group)?;
        self.close_if_timed_out(&stream, sl, &group);
        let (log, done) = {
            let g = group.read();
            let seg = g.segments.get(at.segment as usize).ok_or(StreamError::InvalidOffset(at))?;
            if at.position > seg.records {
                return Err(StreamError::InvalidOffset(at));
            }
            let last = g.segments.len() - 1;
            let at_end = at.segment as usize == last && at.position == seg.records;
            (g.log, g.closed && at_end)
        };
        let _meta = sl.meta.lock();
        let mut meta = self.streamlet_meta(table, streamlet);
        if !meta.consumers.contains_key(name) && meta.consumers.len() >= MAX_CONSUMER_NAMES {
            return Err(StreamError::Consumers(format!(
                "streamlet {streamlet} has committed offsets of its maximum of {MAX_CONSUMER_NAMES} consumer names"
            )));
        }
        let cursor = if done { StreamOffset { group: at.group + 1, segment: 0, position: 0 } } else { at };
        meta.consumers.entry(name.to_owned()).or_default().insert(log, cursor);
        let version = self.write_streamlet_meta(table, streamlet, &meta)?;
        Ok(Committed { done, version })
    }

    /// The log of the MultiLog holding group `group` of the streamlet.
    pub fn stream_group_log(&self, table: TableId, streamlet: u32, group: u64) -> Result<u32, StreamError> {
        let stream = self.inner.stream(table)?;
        let g = stream.streamlet(streamlet)?.group(streamlet, group)?;
        let log = g.read().log;
        Ok(log)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_version_1_decodes() {
        let mut m = StreamletMeta { trim: 7, consumers: BTreeMap::new() };
        assert_eq!(m.encode(), 7u64.to_le_bytes().to_vec(), "no consumers: the version 1 layout");
        m.consumers.insert("billing".into(), BTreeMap::from([(0, StreamOffset { group: 3, segment: 1, position: 9 })]));
        m.consumers.insert("x".into(), BTreeMap::new());
        let v = m.encode();
        assert_eq!(StreamletMeta::decode(&v), Some(m.clone()));
        assert_eq!(StreamletMeta::decode(&7u64.to_le_bytes()).map(|m| m.trim), Some(7));
        for bad in [&v[..v.len() - 1], &v[..5], b"", &[v.as_slice(), &[0]].concat()] {
            assert_eq!(StreamletMeta::decode(bad), None, "{bad:?}");
        }
    }
}
