//! The test vectors of `docs/wire-format.md`, produced independently by
//! `docs/vectors/wire_vectors.py`: each message must encode to exactly
//! these bytes and decode back to the same message.

use shoal_proto::*;
use std::borrow::Cow;

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()).collect()
}

fn body(bytes: &[u8]) -> (Header, &[u8]) {
    let h = check_frame(bytes, DEFAULT_MAX_BODY_BYTES).unwrap().expect("whole frame");
    assert_eq!(h.frame_len(), bytes.len());
    (h, &bytes[HEADER_LEN..])
}

fn check_request(req: Request<'_>, id: u64, expected: &str) {
    let expected = hex(expected);
    let mut out = Vec::new();
    assert_eq!(req.encode(id, &mut out), expected.len());
    assert_eq!(out, expected, "{req:?}");
    let (h, b) = body(&expected);
    assert_eq!(h.request_id, id);
    assert!(!h.is_response());
    assert_eq!(Request::decode(h.opcode, b).unwrap(), req);
}

fn check_response(res: Result<Response<'_>, ErrorStatus>, opcode: Opcode, id: u64, expected: &str) {
    let expected = hex(expected);
    let mut out = Vec::new();
    match &res {
        Ok(r) => r.encode(id, &mut out),
        Err(e) => encode_error(&mut out, id, opcode as u8, e),
    };
    assert_eq!(out, expected, "{res:?}");
    let (h, b) = body(&expected);
    assert_eq!(h.request_id, id);
    assert!(h.is_response());
    assert_eq!(h.opcode, opcode as u8);
    assert_eq!(decode_response(h.opcode, b).unwrap(), res);
}

#[test]
fn requests_match_python_vectors() {
    check_request(Request::Ping, 1, "53 01 01 00 01 00 00 00 00 00 00 00 00 00 00 00");
    check_request(
        Request::Read { table: TableId(7), key: b"k", rules: RejectRules::default() },
        2,
        "53 01 02 00 02 00 00 00 00 00 00 00 16 00 00 00 07 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 6b",
    );
    check_request(
        Request::Write { table: TableId(7), key: b"k", value: b"v1", rules: RejectRules::version_is(Version(5)) },
        3,
        "53 01 03 00 03 00 00 00 00 00 00 00 1c 00 00 00 07 00 00 00 00 00 00 00 09 05 00 00 00 00 00 00 00 01 00 00 00 02 00 00 00 6b 76 31",
    );
    check_request(
        Request::Increment { table: TableId(1), key: b"n", delta: -2, rules: RejectRules::default() },
        4,
        "53 01 05 00 04 00 00 00 00 00 00 00 1e 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 fe ff ff ff ff ff ff ff 01 00 00 00 6e",
    );
    check_request(
        Request::MultiRead(vec![ReadItem { table: TableId(1), key: b"a" }, ReadItem { table: TableId(1), key: b"bc" }]),
        5,
        "53 01 06 00 05 00 00 00 00 00 00 00 1f 00 00 00 02 00 00 00 01 00 00 00 00 00 00 00 01 00 00 00 61 01 00 00 00 00 00 00 00 02 00 00 00 62 63",
    );
    check_request(
        Request::Enumerate { table: TableId(3), cursor: 0, max_count: 100 },
        6,
        "53 01 09 00 06 00 00 00 00 00 00 00 14 00 00 00 03 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 64 00 00 00",
    );
    check_request(
        Request::CreateTable { name: "users" },
        7,
        "53 01 10 00 07 00 00 00 00 00 00 00 07 00 00 00 05 00 75 73 65 72 73",
    );
    check_request(
        Request::Auth { user: b"default", password: b"s3cret" },
        10,
        "53 01 14 00 0a 00 00 00 00 00 00 00 11 00 00 00 07 00 06 00 64 65 66 61 75 6c 74 73 33 63 72 65 74",
    );
    check_request(
        Request::WriteTtl { table: TableId(7), key: b"k", value: b"v", rules: RejectRules::default(), ttl_ms: 60_000 },
        12,
        "53 01 0a 00 0c 00 00 00 00 00 00 00 23 00 00 00 07 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 60 ea 00 00 00 00 00 00 01 00 00 00 01 00 00 00 6b 76",
    );
    check_request(
        Request::ReadTtl { table: TableId(7), key: b"k", rules: RejectRules::default() },
        13,
        "53 01 0b 00 0d 00 00 00 00 00 00 00 16 00 00 00 07 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 6b",
    );
}

/// The chunk opcodes, against docs/vectors/wire_vectors.py.
#[test]
fn chunk_messages_match_python_vectors() {
    let one = ChunkId::new(1, 1);
    check_request(
        Request::CreateChunkTable { name: "graph" },
        15,
        "53 01 15 00 0f 00 00 00 00 00 00 00 07 00 00 00 05 00 67 72 61 70 68",
    );
    check_request(
        Request::ChunkCreate { table: TableId(5), payloads: vec![b"ab", b""] },
        16,
        "53 01 0c 00 10 00 00 00 00 00 00 00 16 00 00 00 05 00 00 00 00 00 00 00 02 00 00 00 02 00 00 00 61 62 00 00 00 00",
    );
    check_response(
        Ok(Response::ChunkCreate(vec![one, ChunkId::new(1, 2)])),
        Opcode::ChunkCreate,
        16,
        "53 01 0c 01 10 00 00 00 00 00 00 00 15 00 00 00 00 02 00 00 00 01 00 00 00 00 00 01 00 02 00 00 00 00 00 01 00",
    );
    check_request(
        Request::ChunkGet { table: TableId(5), ids: vec![one] },
        17,
        "53 01 0d 00 11 00 00 00 00 00 00 00 14 00 00 00 05 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 00 01 00",
    );
    check_response(
        Ok(Response::ChunkGet(vec![Ok((Version(1), b"ab"))])),
        Opcode::ChunkGet,
        17,
        "53 01 0d 01 11 00 00 00 00 00 00 00 14 00 00 00 00 01 00 00 00 00 01 00 00 00 00 00 00 00 02 00 00 00 61 62",
    );
    check_request(
        Request::ChunkPut { table: TableId(5), items: vec![(one, b"xyz")] },
        18,
        "53 01 0e 00 12 00 00 00 00 00 00 00 1b 00 00 00 05 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 00 01 00 03 00 00 00 78 79 7a",
    );
    check_response(
        Ok(Response::ChunkRemove(vec![Ok(Version(2)), Err(ErrorStatus::ObjectDoesntExist)])),
        Opcode::ChunkRemove,
        19,
        "53 01 0f 01 13 00 00 00 00 00 00 00 0f 00 00 00 00 02 00 00 00 00 02 00 00 00 00 00 00 00 04",
    );
}

/// The chunk lock opcodes, against docs/vectors/wire_vectors.py.
#[test]
fn chunk_lock_messages_match_python_vectors() {
    let one = ChunkId::new(1, 1);
    let token = 0x1a2b3c4d5e6f7081;
    check_request(
        Request::ChunkLock { table: TableId(5), chunk: one, owner: 9, mode: LockMode::Exclusive, wait: true, lease_ms: 5000 },
        24,
        "53 01 1b 00 18 00 00 00 00 00 00 00 1e 00 00 00 05 00 00 00 00 00 00 00 01 00 00 00 00 00 01 00 09 00 00 00 00 00 00 00 01 01 88 13 00 00",
    );
    check_response(
        Ok(Response::ChunkLock { token, lease_ms: 5000 }),
        Opcode::ChunkLock,
        24,
        "53 01 1b 01 18 00 00 00 00 00 00 00 0d 00 00 00 00 81 70 6f 5e 4d 3c 2b 1a 88 13 00 00",
    );
    check_response(
        Err(ErrorStatus::LockBusy { after_us: 20000 }),
        Opcode::ChunkLock,
        25,
        "53 01 1b 01 19 00 00 00 00 00 00 00 05 00 00 00 14 20 4e 00 00",
    );
    check_request(
        Request::ChunkUnlock { table: TableId(5), chunk: one, owner: 9, token },
        26,
        "53 01 1c 00 1a 00 00 00 00 00 00 00 20 00 00 00 05 00 00 00 00 00 00 00 01 00 00 00 00 00 01 00 09 00 00 00 00 00 00 00 81 70 6f 5e 4d 3c 2b 1a",
    );
    check_response(
        Err(ErrorStatus::LockLost),
        Opcode::ChunkUnlock,
        26,
        "53 01 1c 01 1a 00 00 00 00 00 00 00 01 00 00 00 16",
    );
    check_request(
        Request::ChunkRenew { table: TableId(5), chunk: one, owner: 9, token, lease_ms: 3000 },
        27,
        "53 01 1d 00 1b 00 00 00 00 00 00 00 24 00 00 00 05 00 00 00 00 00 00 00 01 00 00 00 00 00 01 00 09 00 00 00 00 00 00 00 81 70 6f 5e 4d 3c 2b 1a b8 0b 00 00",
    );
    check_response(
        Ok(Response::ChunkRenew { lease_ms: 3000 }),
        Opcode::ChunkRenew,
        27,
        "53 01 1d 01 1b 00 00 00 00 00 00 00 05 00 00 00 00 b8 0b 00 00",
    );
    check_request(
        Request::ChunkPutLocked { table: TableId(5), chunk: one, owner: 9, token, payload: b"xy" },
        28,
        "53 01 1e 00 1c 00 00 00 00 00 00 00 26 00 00 00 05 00 00 00 00 00 00 00 01 00 00 00 00 00 01 00 09 00 00 00 00 00 00 00 81 70 6f 5e 4d 3c 2b 1a 02 00 00 00 78 79",
    );
    check_response(
        Ok(Response::ChunkPutLocked { version: Version(4) }),
        Opcode::ChunkPutLocked,
        28,
        "53 01 1e 01 1c 00 00 00 00 00 00 00 09 00 00 00 00 04 00 00 00 00 00 00 00",
    );
    check_response(
        Err(ErrorStatus::LockTableFull { limit: 100000 }),
        Opcode::ChunkLock,
        29,
        "53 01 1b 01 1d 00 00 00 00 00 00 00 05 00 00 00 17 a0 86 01 00",
    );
    check_response(
        Err(ErrorStatus::LockOwnerLimit { limit: 10000 }),
        Opcode::ChunkLock,
        30,
        "53 01 1b 01 1e 00 00 00 00 00 00 00 05 00 00 00 18 10 27 00 00",
    );
}

/// A CHUNK_CREATE of more than MAX_CHUNK_CREATE chunks is malformed, and a
/// count the body cannot hold is refused before anything is allocated.
#[test]
fn chunk_requests_bound_their_counts() {
    let payloads = vec![&b""[..]; MAX_CHUNK_CREATE + 1];
    let mut out = Vec::new();
    Request::ChunkCreate { table: TableId(5), payloads }.encode(1, &mut out);
    let (h, b) = body(&out);
    assert_eq!(Request::decode(h.opcode, b), Err(DecodeError::Malformed("more than 1024 chunks in one CHUNK_CREATE")));
    let mut lying = Vec::new();
    lying.extend_from_slice(&5u64.to_le_bytes());
    lying.extend_from_slice(&u32::MAX.to_le_bytes());
    lying.extend_from_slice(&[0; 8]);
    for op in [Opcode::ChunkGet, Opcode::ChunkPut, Opcode::ChunkRemove, Opcode::ChunkCreate] {
        assert_eq!(
            Request::decode(op as u8, &lying),
            Err(DecodeError::Malformed("item count exceeds the message")),
            "{op:?}"
        );
    }
}

/// The stream opcodes, against docs/vectors/wire_vectors.py.
#[test]
fn stream_messages_match_python_vectors() {
    let asked = StreamShape { streamlets: 4, logs: 0, segment_bytes: 1 << 20, group_segments: 4, group_timeout_ms: 0 };
    let shape = StreamShape { logs: 2, ..asked };
    check_request(
        Request::CreateStream { name: "clicks", shape: asked },
        20,
        "53 01 16 00 14 00 00 00 00 00 00 00 20 00 00 00 06 00 63 6c 69 63 6b 73 04 00 00 00 00 00 00 00 00 00 10 00 04 00 00 00 00 00 00 00 00 00 00 00",
    );
    check_response(
        Ok(Response::CreateStream { table: TableId(6), shape }),
        Opcode::CreateStream,
        20,
        "53 01 16 01 14 00 00 00 00 00 00 00 21 00 00 00 00 06 00 00 00 00 00 00 00 04 00 00 00 02 00 00 00 00 00 10 00 04 00 00 00 00 00 00 00 00 00 00 00",
    );
    check_request(
        Request::Produce { table: TableId(6), streamlet: 1, producer: 9, records: vec![b"a", b"bc"] },
        21,
        "53 01 17 00 15 00 00 00 00 00 00 00 23 00 00 00 06 00 00 00 00 00 00 00 01 00 00 00 09 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 61 02 00 00 00 62 63",
    );
    let at = StreamOffset { group: 3, segment: 0, position: 7 };
    check_response(
        Ok(Response::Produce { first: at, count: 2 }),
        Opcode::Produce,
        21,
        "53 01 17 01 15 00 00 00 00 00 00 00 15 00 00 00 00 03 00 00 00 00 00 00 00 00 00 00 00 07 00 00 00 02 00 00 00",
    );
    check_request(
        Request::Consume { table: TableId(6), streamlet: 1, from: at, max_bytes: 65536 },
        22,
        "53 01 18 00 16 00 00 00 00 00 00 00 20 00 00 00 06 00 00 00 00 00 00 00 01 00 00 00 03 00 00 00 00 00 00 00 00 00 00 00 07 00 00 00 00 00 01 00",
    );
    check_response(
        Ok(Response::Consume {
            next: StreamOffset { position: 9, ..at },
            end_of_group: true,
            records: vec![b"a", b"bc"],
        }),
        Opcode::Consume,
        22,
        "53 01 18 01 16 00 00 00 00 00 00 00 21 00 00 00 00 03 00 00 00 00 00 00 00 00 00 00 00 09 00 00 00 01 02 00 00 00 01 00 00 00 61 02 00 00 00 62 63",
    );
    check_request(
        Request::DescribeStream { table: TableId(6), streamlet: 1, from_group: 0, max_groups: 100 },
        23,
        "53 01 19 00 17 00 00 00 00 00 00 00 18 00 00 00 06 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00 00 00 00 00 64 00 00 00",
    );
    let group = StreamGroup { id: 3, log: 1, segments: 1, records: 9, bytes: 20, closed: true };
    check_response(
        Ok(Response::DescribeStream { shape, groups: vec![group] }),
        Opcode::DescribeStream,
        23,
        "53 01 19 01 17 00 00 00 00 00 00 00 3e 00 00 00 00 04 00 00 00 02 00 00 00 00 00 10 00 04 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 03 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 09 00 00 00 00 00 00 00 14 00 00 00 00 00 00 00 01",
    );
}

/// A PRODUCE of no records or more than MAX_PRODUCE_RECORDS is malformed;
/// counts the body cannot hold, and unknown flag bits, are refused before
/// anything is allocated for them.
#[test]
fn stream_messages_bound_their_counts_and_flags() {
    for n in [0, MAX_PRODUCE_RECORDS + 1] {
        let records = vec![&b""[..]; n];
        let mut out = Vec::new();
        Request::Produce { table: TableId(6), streamlet: 0, producer: 1, records }.encode(1, &mut out);
        let (h, b) = body(&out);
        assert_eq!(Request::decode(h.opcode, b), Err(DecodeError::Malformed("a PRODUCE carries 1-65536 records")));
    }
    let mut lying = Vec::new();
    lying.extend_from_slice(&6u64.to_le_bytes());
    lying.extend_from_slice(&0u32.to_le_bytes());
    lying.extend_from_slice(&1u64.to_le_bytes());
    lying.extend_from_slice(&1000u32.to_le_bytes());
    lying.extend_from_slice(&[0; 8]);
    assert_eq!(
        Request::decode(Opcode::Produce as u8, &lying),
        Err(DecodeError::Malformed("item count exceeds the message"))
    );
    // A CONSUME response claiming u32::MAX records, and one with unknown flags.
    let mut res = vec![0u8];
    res.extend_from_slice(&[0; 16]);
    res.push(0);
    res.extend_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        decode_response(Opcode::Consume as u8, &res),
        Err(DecodeError::Malformed("item count exceeds the message"))
    );
    res[17] = 2;
    assert_eq!(decode_response(Opcode::Consume as u8, &res), Err(DecodeError::Malformed("unknown CONSUME flags")));
    // Trailing bytes after a CONSUME request.
    let mut out = Vec::new();
    Request::Consume { table: TableId(6), streamlet: 0, from: StreamOffset::default(), max_bytes: 1 }
        .encode(1, &mut out);
    out.push(0);
    assert_eq!(
        Request::decode(Opcode::Consume as u8, &out[HEADER_LEN..]),
        Err(DecodeError::Malformed("trailing bytes after the message"))
    );
}

/// A WRITE_TTL whose time to live is 0 is malformed (an object must be
/// alive when written), and the new opcodes leave WRITE and READ as they were.
#[test]
fn write_ttl_of_zero_is_malformed() {
    let mut out = Vec::new();
    Request::WriteTtl { table: TableId(7), key: b"k", value: b"v", rules: RejectRules::default(), ttl_ms: 0 }
        .encode(1, &mut out);
    let (h, b) = body(&out);
    assert_eq!(Request::decode(h.opcode, b), Err(DecodeError::Malformed("a time to live must be at least 1 ms")));
}

#[test]
fn responses_match_python_vectors() {
    check_response(
        Ok(Response::Read { version: Version(9), value: b"hello" }),
        Opcode::Read,
        2,
        "53 01 02 01 02 00 00 00 00 00 00 00 12 00 00 00 00 09 00 00 00 00 00 00 00 05 00 00 00 68 65 6c 6c 6f",
    );
    check_response(
        Err(ErrorStatus::WrongVersion { version: Version(6) }),
        Opcode::Write,
        3,
        "53 01 03 01 03 00 00 00 00 00 00 00 09 00 00 00 06 06 00 00 00 00 00 00 00",
    );
    check_response(
        Ok(Response::MultiRead(vec![Ok((Version(3), &b"x"[..])), Err(ErrorStatus::ObjectDoesntExist)])),
        Opcode::MultiRead,
        5,
        "53 01 06 01 05 00 00 00 00 00 00 00 14 00 00 00 00 02 00 00 00 00 03 00 00 00 00 00 00 00 01 00 00 00 78 04",
    );
    check_response(
        Ok(Response::Enumerate { objects: vec![Object { key: b"k", value: b"v", version: Version(2) }], next: Some(0x100) }),
        Opcode::Enumerate,
        6,
        "53 01 09 01 06 00 00 00 00 00 00 00 20 00 00 00 00 01 00 01 00 00 00 00 00 00 01 00 00 00 02 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 6b 76",
    );
    check_response(
        Ok(Response::CreateTable { table: TableId(4) }),
        Opcode::CreateTable,
        7,
        "53 01 10 01 07 00 00 00 00 00 00 00 09 00 00 00 00 04 00 00 00 00 00 00 00",
    );
    check_response(
        Ok(Response::Stats(vec![
            Stat { name: Cow::Borrowed("objects"), value: StatValue::U64(3) },
            Stat { name: Cow::Borrowed("log_utilisation"), value: StatValue::F64(0.5) },
        ])),
        Opcode::Stats,
        8,
        "53 01 13 01 08 00 00 00 00 00 00 00 2d 00 00 00 00 02 00 07 6f 62 6a 65 63 74 73 00 03 00 00 00 00 00 00 00 0f 6c 6f 67 5f 75 74 69 6c 69 73 61 74 69 6f 6e 01 00 00 00 00 00 00 e0 3f",
    );
    check_response(
        Err(ErrorStatus::UnknownTable(TableId(42))),
        Opcode::Read,
        9,
        "53 01 02 01 09 00 00 00 00 00 00 00 09 00 00 00 01 2a 00 00 00 00 00 00 00",
    );
    check_response(Ok(Response::Auth), Opcode::Auth, 10, "53 01 14 01 0a 00 00 00 00 00 00 00 01 00 00 00 00");
    check_response(
        Err(ErrorStatus::AuthFailed),
        Opcode::Auth,
        10,
        "53 01 14 01 0a 00 00 00 00 00 00 00 01 00 00 00 0e",
    );
    check_response(
        Err(ErrorStatus::NotAuthenticated),
        Opcode::Read,
        11,
        "53 01 02 01 0b 00 00 00 00 00 00 00 01 00 00 00 0d",
    );
    check_response(
        Ok(Response::WriteTtl { version: Version(3) }),
        Opcode::WriteTtl,
        12,
        "53 01 0a 01 0c 00 00 00 00 00 00 00 09 00 00 00 00 03 00 00 00 00 00 00 00",
    );
    check_response(
        Ok(Response::ReadTtl {
            version: Version(3),
            expires_at: Some(UnixMillis(1_700_000_060_000)),
            ttl_ms: 59_000,
        }),
        Opcode::ReadTtl,
        13,
        "53 01 0b 01 0d 00 00 00 00 00 00 00 19 00 00 00 00 03 00 00 00 00 00 00 00 60 52 e6 cf 8b 01 00 00 78 e6 00 00 00 00 00 00",
    );
    check_response(
        Ok(Response::ReadTtl { version: Version(2), expires_at: None, ttl_ms: 0 }),
        Opcode::ReadTtl,
        14,
        "53 01 0b 01 0e 00 00 00 00 00 00 00 19 00 00 00 00 02 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
    );
}

/// The key-hash vectors of `docs/wire-format.md` (the same as the log
/// format's): the hash is part of the protocol.
#[test]
fn key_hash_matches_documented_vectors() {
    assert_eq!(key_hash(TableId(0), b"").0, 0xc77b_3abb_6f87_acd9);
    assert_eq!(key_hash(TableId(1), b"a").0, 0xc777_2475_8a6e_c4d1);
    assert_eq!(key_hash(TableId(7), b"user:1000").0, 0x8a01_8683_baf2_cb8a);
    assert_eq!(key_hash(TableId(1 << 40), b"\x00\xff").0, 0x3ddd_f62c_2c38_3f28);
    assert_eq!(key_hash(TableId(65), b"foo").0, 0xbe5a_5e06_cccf_c836);
    assert_eq!(key_hash(TableId(65), b"{user1000}.following").0, 0x35cc_5a1b_4139_4a5b);
}

/// Consumer names (`docs/wire-format.md`, "Consumer names"): the vectors
/// of `docs/vectors/wire_vectors.py`; names of 0 or more than 255 bytes,
/// instance 0, lease 0 and unknown flags are malformed.
#[test]
fn consumer_name_messages_match_the_vectors_and_refuse_bad_fields() {
    let who = Subscriber { table: TableId(6), streamlet: 1, name: "billing", instance: 5, lease_ms: 3000 };
    check_request(Request::ClaimGroup(who), 31, "53 01 1f 00 1f 00 00 00 00 00 00 00 21 00 00 00 06 00 00 00 00 00 00 00 01 00 00 00 05 00 00 00 00 00 00 00 b8 0b 00 00 07 00 62 69 6c 6c 69 6e 67");
    let claim = GroupClaim { log: 2, from: StreamOffset { group: 3, segment: 1, position: 4 }, lease_ms: 3000 };
    check_response(Ok(Response::ClaimGroup(Some(claim))), Opcode::ClaimGroup, 31, "53 01 1f 01 1f 00 00 00 00 00 00 00 1a 00 00 00 00 01 02 00 00 00 03 00 00 00 00 00 00 00 01 00 00 00 04 00 00 00 b8 0b 00 00");
    check_response(Ok(Response::ClaimGroup(None)), Opcode::ClaimGroup, 32, "53 01 1f 01 20 00 00 00 00 00 00 00 1a 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00");
    check_request(
        Request::ConsumeClaimed { who, from: claim.from, max_bytes: 4096 },
        33,
        "53 01 20 00 21 00 00 00 00 00 00 00 35 00 00 00 06 00 00 00 00 00 00 00 01 00 00 00 05 00 00 00 00 00 00 00 b8 0b 00 00 03 00 00 00 00 00 00 00 01 00 00 00 04 00 00 00 00 10 00 00 07 00 62 69 6c 6c 69 6e 67",
    );
    check_response(
        Err(ErrorStatus::LockLost),
        Opcode::ConsumeClaimed,
        33,
        "53 01 20 01 21 00 00 00 00 00 00 00 01 00 00 00 16",
    );
    let at = StreamOffset { position: 9, ..claim.from };
    check_request(Request::CommitGroup { who, at, release: true }, 34, "53 01 21 00 22 00 00 00 00 00 00 00 32 00 00 00 06 00 00 00 00 00 00 00 01 00 00 00 05 00 00 00 00 00 00 00 b8 0b 00 00 03 00 00 00 00 00 00 00 01 00 00 00 09 00 00 00 01 07 00 62 69 6c 6c 69 6e 67");
    check_response(
        Ok(Response::CommitGroup { done: true }),
        Opcode::CommitGroup,
        34,
        "53 01 21 01 22 00 00 00 00 00 00 00 02 00 00 00 00 01",
    );

    let long = "x".repeat(MAX_CONSUMER_NAME + 1);
    for (bad, why) in [
        (Subscriber { name: "", ..who }, "a consumer name has 1-255 bytes"),
        (Subscriber { name: &long, ..who }, "a consumer name has 1-255 bytes"),
        (Subscriber { instance: 0, ..who }, "consumer instance id 0 is reserved"),
        (Subscriber { lease_ms: 0, ..who }, "a consumer group lease must be at least 1 ms"),
    ] {
        for req in [
            Request::ClaimGroup(bad),
            Request::ConsumeClaimed { who: bad, from: at, max_bytes: 1 },
            Request::CommitGroup { who: bad, at, release: false },
        ] {
            let mut out = Vec::new();
            req.encode(1, &mut out);
            let (h, b) = body(&out);
            assert_eq!(Request::decode(h.opcode, b), Err(DecodeError::Malformed(why)), "{req:?}");
        }
    }
    let mut out = Vec::new();
    Request::CommitGroup { who, at, release: false }.encode(1, &mut out);
    out[HEADER_LEN + 40] = 2;
    assert_eq!(
        Request::decode(Opcode::CommitGroup as u8, &out[HEADER_LEN..]),
        Err(DecodeError::Malformed("unknown COMMIT_GROUP flags"))
    );
    let mut res = vec![0u8; 26];
    res[1] = 2;
    assert_eq!(
        decode_response(Opcode::ClaimGroup as u8, &res),
        Err(DecodeError::Malformed("bad CLAIM_GROUP response flags"))
    );
    assert_eq!(
        decode_response(Opcode::CommitGroup as u8, &[0, 3]),
        Err(DecodeError::Malformed("unknown COMMIT_GROUP response flags"))
    );
}
