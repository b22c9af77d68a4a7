//! Replica scanning: `format::scan` (Tailwind's Algorithm 1, which finds
//! the trusted prefix of a possibly torn segment buffer) and
//! `restore::verify_replica` (which every replica read back from a backup
//! goes through). The first input byte's low bit chooses whether the CRCs
//! and checksum entries are repaired first (`seal_entries`).
//!
//! Asserts: no panic; the verified prefix ends with a checksum entry whose
//! value is the one reported, and is a prefix `scan` verifies whole;
//! scanning any prefix of the bytes verifies no more than the whole, and
//! any prefix at least as long as the verified length verifies exactly as
//! much; `verify_replica` trusts no more than `scan`, every entry of what it
//! trusts decodes with its CRC, and its header and digest are the last ones
//! within that prefix.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal_engine::format::{self, Entry, EntryIter, EntryType, CHECKSUM_ENTRY_BYTES};
use shoal_fuzz::seal_entries;
use shoal_replication::restore::verify_replica;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut buf = rest.to_vec();
    if mode & 1 == 1 {
        seal_entries(&mut buf);
    }
    let s = format::scan(&buf);
    assert!(s.verified_len <= buf.len());
    if s.verified_len == 0 {
        assert_eq!((s.last_checksum, s.entries), (0, 0));
    } else {
        let tail = &buf[s.verified_len - CHECKSUM_ENTRY_BYTES..s.verified_len];
        assert_eq!(tail[0], EntryType::Checksum as u8);
        assert_eq!(u32::from_le_bytes(tail[1..].try_into().expect("4 bytes")), s.last_checksum);
        assert_ne!(s.last_checksum, 0);
        assert_eq!(format::scan(&buf[..s.verified_len]), s);
    }
    let step = (buf.len() / 32).max(1);
    for cut in (0..buf.len()).step_by(step) {
        let p = format::scan(&buf[..cut]);
        assert!(p.verified_len <= s.verified_len);
        if cut >= s.verified_len {
            assert_eq!(p, s, "a prefix longer than the verified length verifies differently");
        }
    }

    let v = verify_replica(&buf);
    assert!(v.len <= s.verified_len);
    let (mut end, mut header, mut digest, mut last) = (0, None, None, 0);
    for item in EntryIter::new(&buf[..v.len]) {
        let (at, e) = item.expect("every entry of a verified replica decodes");
        end = at + format::decode(&buf[at..]).expect("decodes").1;
        match e {
            Entry::SegmentHeader(h) => header = Some(h),
            Entry::LogDigest(ids) => digest = Some(ids),
            Entry::Checksum(c) => last = c,
            Entry::Object(_)
            | Entry::Tombstone(_)
            | Entry::SafeVersion(_)
            | Entry::Chunk(_)
            | Entry::ChunkTombstone(_)
            | Entry::StreamBatch(_)
            | Entry::ChunkRun(_) => {}
        }
    }
    assert_eq!(end, v.len);
    assert_eq!(v.last_checksum, last);
    if v.len > 0 {
        assert_eq!(buf[v.len - CHECKSUM_ENTRY_BYTES], EntryType::Checksum as u8);
    }
    assert_eq!((v.header, &v.digest), (header, &digest));
    assert_eq!(verify_replica(&buf[..v.len]), v, "the verified prefix verifies differently on its own");
});
