//! The shape of a stream and the address of a record in it, shared by the
//! store, the wire format, the cluster map and the client
//! (`docs/streams.md`).

use std::fmt;

/// Most streamlets a stream may have.
pub const MAX_STREAMLETS: u32 = 4096;
/// Most logs a streamlet's MultiLog may have.
pub const MAX_STREAM_LOGS: u32 = 256;
/// Smallest and largest stream segment (bytes of records).
pub const MIN_STREAM_SEGMENT_BYTES: u32 = 4096;
pub const MAX_STREAM_SEGMENT_BYTES: u32 = 64 << 20;
/// Most segments a group may have.
pub const MAX_GROUP_SEGMENTS: u32 = 1024;

/// A stream's fixed parameters, set when it is created (KerA, Ch. 5.2.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct StreamShape {
    /// Streamlets (fixed for the stream's life).
    pub streamlets: u32,
    /// Logs of each streamlet's MultiLog: producers append to them in
    /// parallel, each producer to one (its id modulo this).
    pub logs: u32,
    /// Bytes of records (as stored: each with its varint length) that a
    /// stream segment holds before the next batch starts a new one; a
    /// batch larger than this has a segment to itself.
    pub segment_bytes: u32,
    /// Segments of a group: a group closes when its last segment is full.
    pub group_segments: u32,
    /// A group also closes this long after it opened (0: never by time).
    pub group_timeout_ms: u64,
}

impl StreamShape {
    /// Why the shape cannot be a stream's, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        if self.streamlets == 0 || self.streamlets > MAX_STREAMLETS {
            return Err(format!("streamlets must be 1-{MAX_STREAMLETS}, not {}", self.streamlets));
        }
        if self.logs == 0 || self.logs > MAX_STREAM_LOGS {
            return Err(format!("logs per streamlet must be 1-{MAX_STREAM_LOGS}, not {}", self.logs));
        }
        if !(MIN_STREAM_SEGMENT_BYTES..=MAX_STREAM_SEGMENT_BYTES).contains(&self.segment_bytes) {
            return Err(format!(
                "segment bytes must be {MIN_STREAM_SEGMENT_BYTES}-{MAX_STREAM_SEGMENT_BYTES}, not {}",
                self.segment_bytes
            ));
        }
        if self.group_segments == 0 || self.group_segments > MAX_GROUP_SEGMENTS {
            return Err(format!("segments per group must be 1-{MAX_GROUP_SEGMENTS}, not {}", self.group_segments));
        }
        Ok(())
    }
}

/// The key whose hash ([`crate::key_hash`] with the stream's table id)
/// routes every request of a streamlet and partitions its batches for
/// recovery: the streamlet's number, 4 bytes little-endian. Part of the
/// protocol: a stream's streamlets are spread over its tablets by it.
pub fn streamlet_key(streamlet: u32) -> [u8; 4] {
    streamlet.to_le_bytes()
}

/// Where a consumer is in a group of a streamlet: KerA's application
/// offset [stream, streamlet, group, segment, position] without the first
/// two, which the request names. `segment` counts from 0 within the
/// group; `position` is the index of a record in its segment (0: the first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamOffset {
    pub group: u64,
    pub segment: u32,
    pub position: u32,
}

impl fmt::Display for StreamOffset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.group, self.segment, self.position)
    }
}

impl std::str::FromStr for StreamOffset {
    type Err = String;

    /// `group:segment:position`, or `group` alone (its start).
    fn from_str(s: &str) -> Result<StreamOffset, String> {
        let bad = || format!("offset '{s}' is not group[:segment:position]");
        let mut it = s.split(':');
        let group = it.next().ok_or_else(bad)?.parse().map_err(|_| bad())?;
        let (segment, position) = match (it.next(), it.next(), it.next()) {
            (None, _, _) => (0, 0),
            (Some(a), Some(b), None) => (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?),
            _ => return Err(bad()),
        };
        Ok(StreamOffset { group, segment, position })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_parses_and_prints() {
        let o: StreamOffset = "7:2:31".parse().unwrap();
        assert_eq!(o, StreamOffset { group: 7, segment: 2, position: 31 });
        assert_eq!(o.to_string(), "7:2:31");
        assert_eq!("4".parse::<StreamOffset>().unwrap(), StreamOffset { group: 4, segment: 0, position: 0 });
        for bad in ["", "x", "1:2", "1:2:3:4", "1:-2:3"] {
            assert!(bad.parse::<StreamOffset>().is_err(), "{bad}");
        }
    }

    #[test]
    fn shape_check_names_the_bad_field() {
        let ok = StreamShape { streamlets: 4, logs: 2, segment_bytes: 1 << 20, group_segments: 4, group_timeout_ms: 0 };
        assert!(ok.check().is_ok());
        assert!(StreamShape { streamlets: 0, ..ok }.check().unwrap_err().contains("streamlets"));
        assert!(StreamShape { logs: 0, ..ok }.check().unwrap_err().contains("logs"));
        assert!(StreamShape { segment_bytes: 10, ..ok }.check().unwrap_err().contains("segment bytes"));
        assert!(StreamShape { group_segments: 0, ..ok }.check().unwrap_err().contains("segments per group"));
    }
}
