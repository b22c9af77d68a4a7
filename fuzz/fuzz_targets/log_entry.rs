//! Log entries (`shoal-engine`, `format`): `read_header`, `decode`,
//! `decode_trusted`, `parse_object`, `EntryIter` and `filter_entries`.
//! The first input byte's low bit chooses whether the entries' CRCs are
//! repaired first (`seal_entries`), to reach what lies behind them.
//!
//! Asserts: no panic; `decode` agrees with `read_header` on the length and
//! never reads past the bytes given; `decode_trusted` accepts whatever
//! `decode` accepts, identically; an entry that decodes re-encodes (with the
//! `encode_*` of its type) to bytes that decode to the same entry, are as
//! long as `*_len` says, and equal the input's bytes exactly when the input
//! used the shortest length field and varints (writers must; readers need
//! not insist: the CRC covers them); `parse_object` agrees with `decode`;
//! `filter_entries` keeps whole entries byte for byte, counts them, and its
//! safe version is above every version it saw.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_engine::format::{self, Entry, EntryIter, FORMAT_VERSION};
use shoal_fuzz::seal_entries;

fn reencode(e: &Entry<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    let n = match e {
        Entry::SegmentHeader(h) => format::encode_segment_header(&mut out, h.log, h.segment, h.capacity),
        Entry::Object(o) => {
            let n = format::encode_object_with(&mut out, o.table, o.version, o.expiry, o.key, o.value);
            assert_eq!(n, format::object_len_with(o.table, o.version, o.expiry, o.key.len(), o.value.len()));
            n
        }
        Entry::Tombstone(t) => {
            let n = format::encode_tombstone(&mut out, t.table, t.version, t.segment, t.key);
            assert_eq!(n, format::tombstone_len(t.table, t.version, t.segment, t.key.len()));
            n
        }
        Entry::LogDigest(ids) => {
            let n = format::encode_digest(&mut out, ids);
            assert_eq!(n, format::digest_len(ids.len()));
            n
        }
        Entry::SafeVersion(v) => format::encode_safe_version(&mut out, *v),
        Entry::Checksum(c) => format::encode_checksum(&mut out, *c),
        Entry::Chunk(c) => {
            let n = format::encode_chunk(&mut out, c.table, c.id, c.version, c.payload);
            assert_eq!(n, format::chunk_len(c.table, c.id, c.version, c.payload.len()));
            n
        }
        Entry::ChunkTombstone(t) => {
            let n = format::encode_chunk_tombstone(&mut out, t.table, t.id, t.version, t.segment);
            assert_eq!(n, format::chunk_tombstone_len(t.table, t.id, t.version, t.segment));
            n
        }
        Entry::StreamBatch(b) => {
            let records: Vec<&[u8]> = b.iter().collect();
            assert_eq!(records.len(), b.count as usize, "a decoded batch walks to its count");
            let n = format::encode_stream_batch(&mut out, &b.place, &records);
            // Record lengths re-encode in their shortest form (a reader accepts
            // longer ones; the CRC covers them).
            assert_eq!(n, format::stream_batch_len(&b.place, records.len(), format::batch_records_len(&records)));
            n
        }
        Entry::ChunkRun(run) => {
            let h = &run.header;
            let records: Vec<(u64, &[u8])> = run.iter().map(|c| (c.id.local(), c.payload)).collect();
            let n = format::encode_chunk_run(&mut out, h.table, h.node, h.version, &records);
            let ids = (records[0].0, records[records.len() - 1].0, records.len());
            assert_eq!(n, format::chunk_run_len(h.table, h.node, h.version, h.payload_len, ids));
            n
        }
    };
    assert_eq!(n, out.len());
    out
}

fn one_entry(buf: &[u8]) {
    let decoded = format::decode(buf);
    let trusted = format::decode_trusted(buf);
    let Ok((entry, len)) = decoded else { return };
    assert_eq!(trusted.as_ref(), Ok(&(entry.clone(), len)), "decode_trusted disagrees with decode");
    let h = format::read_header(buf).expect("a decoded entry has a header");
    assert_eq!(h.total_len(), len);
    assert!(len <= buf.len());
    let input = &buf[..len];
    if let Entry::Object(o) = &entry {
        assert_eq!(format::parse_object(input).as_ref(), Ok(o));
    }
    if let Entry::Chunk(c) = &entry {
        assert_eq!(format::parse_chunk(input).as_ref(), Ok(c));
    }
    if let Entry::ChunkRun(run) = &entry {
        assert_eq!(format::parse_chunk_run(input).as_ref(), Ok(run));
        // The fixed part alone places every record as the whole entry does.
        let h = format::parse_chunk_run_header(&input[..len.min(format::MAX_RUN_HEADER_BYTES)]);
        assert_eq!(h, Ok(run.header));
    }
    let mut out = reencode(&entry);
    let (back, back_len) = format::decode(&out).expect("an encoded entry decodes");
    assert_eq!(back_len, out.len());
    match (&entry, back) {
        // The writer always writes its own format version.
        (Entry::SegmentHeader(a), Entry::SegmentHeader(b)) => {
            assert_eq!(b.format, FORMAT_VERSION);
            assert_eq!(*a, format::SegmentHeaderView { format: a.format, ..b });
            if a.format != FORMAT_VERSION && out.len() == input.len() {
                out[2 + 4] = a.format; // tag, length byte, CRC, then the format
                seal_entries(&mut out);
            }
        }
        // A batch's records re-encode with their shortest length varints:
        // the same records, not always the same bytes.
        (Entry::StreamBatch(a), Entry::StreamBatch(b)) => {
            assert_eq!((&a.place, a.count), (&b.place, b.count), "a batch's place does not survive a round trip");
            assert!(a.iter().eq(b.iter()), "a batch's records do not survive a round trip");
        }
        // A run's ids re-encode with the narrowest width (none when they
        // are consecutive): the same chunks, not always the same bytes.
        (Entry::ChunkRun(a), Entry::ChunkRun(b)) => {
            let fixed = |h: &format::ChunkRunHeader| (h.table, h.node, h.version, h.payload_len, h.count, h.first);
            assert_eq!(fixed(&a.header), fixed(&b.header), "a run's fixed part does not survive a round trip");
            assert!(a.iter().eq(b.iter()), "a run's chunks do not survive a round trip");
        }
        (a, b) => assert_eq!(*a, b, "an entry does not survive a round trip"),
    }
    if out.len() == input.len() {
        assert_eq!(out, input, "an entry in the shortest form does not re-encode to itself");
    } else {
        assert!(out.len() < input.len(), "the encoder is not the shortest form");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut buf = rest.to_vec();
    if mode & 1 == 1 {
        seal_entries(&mut buf);
    }
    let _ = format::read_header(&buf);
    let _ = format::parse_object(&buf);
    let _ = format::parse_chunk(&buf);
    let _ = format::parse_chunk_run(&buf);
    one_entry(&buf);

    let mut offsets = Vec::new();
    let mut end = 0;
    for item in EntryIter::new(&buf) {
        match item {
            Ok((at, e)) => {
                assert_eq!(at, end);
                one_entry(&buf[at..]);
                end = at + format::decode(&buf[at..]).expect("iterated").1;
                offsets.push((at, end, e));
            }
            Err(_) => break,
        }
    }
    assert!(end <= buf.len());

    // Keep every other object or tombstone.
    let mut out = Vec::new();
    let mut flip = false;
    let filtered = format::filter_entries(
        &buf[..end],
        |_, _: &[u8]| {
            flip = !flip;
            flip
        },
        &mut out,
    )
    .expect("entries that iterate filter");
    let (mut expect, mut objects, mut tombstones, mut safe, mut keep) = (Vec::new(), 0, 0, 0u64, false);
    for (at, end, e) in &offsets {
        let (kept, version) = match e {
            Entry::Object(o) => {
                keep = !keep;
                objects += keep as u32;
                (keep, o.version.0.saturating_add(1))
            }
            Entry::Tombstone(t) => {
                keep = !keep;
                tombstones += keep as u32;
                (keep, t.version.0.saturating_add(1))
            }
            // Chunks are kept or not like objects; their versions are per
            // chunk and do not raise the safe version.
            Entry::Chunk(_) => {
                keep = !keep;
                objects += keep as u32;
                (keep, 0)
            }
            Entry::ChunkTombstone(_) => {
                keep = !keep;
                tombstones += keep as u32;
                (keep, 0)
            }
            // Stream batches are kept or not like objects, with no version.
            Entry::StreamBatch(_) => {
                keep = !keep;
                objects += keep as u32;
                (keep, 0)
            }
            // A run's records are kept or not one by one; a run kept in
            // part comes out as the run of the records kept.
            Entry::ChunkRun(run) => {
                let kept: Vec<(u64, &[u8])> = run
                    .iter()
                    .filter(|_| {
                        keep = !keep;
                        keep
                    })
                    .map(|c| (c.id.local(), c.payload))
                    .collect();
                objects += kept.len() as u32;
                if kept.len() != run.len() && !kept.is_empty() {
                    let h = &run.header;
                    format::encode_chunk_run(&mut expect, h.table, h.node, h.version, &kept);
                }
                (kept.len() == run.len(), 0)
            }
            Entry::SafeVersion(v) => (false, v.0),
            _ => (false, 0),
        };
        safe = safe.max(version);
        if kept {
            expect.extend_from_slice(&buf[*at..*end]);
        }
    }
    assert_eq!(out, expect, "filter_entries did not keep exactly the chosen entries");
    assert_eq!((filtered.objects, filtered.tombstones, filtered.safe_version), (objects, tombstones, safe));
});
