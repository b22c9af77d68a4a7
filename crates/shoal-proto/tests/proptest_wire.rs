//! Property tests of the wire format: random and mutated bytes never panic
//! the decoders; every message round-trips; a stream split at any byte
//! decodes to the same frames.

use proptest::prelude::*;
use shoal_proto::*;
use std::borrow::Cow;

#[derive(Clone, Debug)]
struct Item {
    table: u64,
    key: Vec<u8>,
    value: Vec<u8>,
    rules: RejectRules,
    delta: i64,
}

fn arb_rules() -> impl Strategy<Value = RejectRules> {
    (any::<u64>(), any::<[bool; 4]>()).prop_map(|(v, b)| RejectRules {
        given_version: Version(v),
        doesnt_exist: b[0],
        exists: b[1],
        version_le_given: b[2],
        version_ne_given: b[3],
    })
}

fn arb_item() -> impl Strategy<Value = Item> {
    (
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..12),
        prop::collection::vec(any::<u8>(), 0..24),
        arb_rules(),
        any::<i64>(),
    )
        .prop_map(|(table, key, value, rules, delta)| Item { table, key, value, rules, delta })
}

fn arb_status() -> impl Strategy<Value = ErrorStatus> {
    prop_oneof![
        any::<u64>().prop_map(|t| ErrorStatus::UnknownTable(TableId(t))),
        (any::<u32>(), any::<u32>()).prop_map(|(len, max)| ErrorStatus::KeyTooLarge { len, max }),
        (any::<u32>(), any::<u32>()).prop_map(|(len, max)| ErrorStatus::ValueTooLarge { len, max }),
        Just(ErrorStatus::ObjectDoesntExist),
        any::<u64>().prop_map(|v| ErrorStatus::ObjectExists { version: Version(v) }),
        any::<u64>().prop_map(|v| ErrorStatus::WrongVersion { version: Version(v) }),
        Just(ErrorStatus::NotAnInteger),
        Just(ErrorStatus::Overflow),
        Just(ErrorStatus::OutOfMemory),
        Just(ErrorStatus::UnknownTableName),
        Just(ErrorStatus::UnknownTablet),
        any::<u32>().prop_map(|after_us| ErrorStatus::Retry { after_us }),
        ".{0,20}".prop_map(ErrorStatus::MalformedRequest),
        Just(ErrorStatus::UnknownOpcode),
        (any::<u32>(), any::<u32>()).prop_map(|(len, max)| ErrorStatus::FrameTooLarge { len, max }),
        Just(ErrorStatus::UnsupportedVersion),
        Just(ErrorStatus::NotAuthenticated),
        Just(ErrorStatus::AuthFailed),
        any::<u32>().prop_map(|after_us| ErrorStatus::LockBusy { after_us }),
        Just(ErrorStatus::LockNotHeld),
        Just(ErrorStatus::LockLost),
        any::<u32>().prop_map(|limit| ErrorStatus::LockTableFull { limit }),
        any::<u32>().prop_map(|limit| ErrorStatus::LockOwnerLimit { limit }),
    ]
}

#[derive(Clone, Debug)]
struct Spec {
    kind: u8,
    items: Vec<Item>,
    statuses: Vec<Option<ErrorStatus>>,
    cursor: u64,
    more: bool,
    count: u32,
    name: String,
    stats: Vec<(String, bool, u64)>,
}

fn arb_spec() -> impl Strategy<Value = Spec> {
    (
        0u8..25,
        prop::collection::vec(arb_item(), 0..5),
        prop::collection::vec(prop::option::of(arb_status()), 5),
        any::<u64>(),
        any::<bool>(),
        any::<u32>(),
        "[a-z_]{1,16}",
        prop::collection::vec(("[a-z_]{0,12}", any::<bool>(), any::<u64>()), 0..4),
    )
        .prop_map(|(kind, items, statuses, cursor, more, count, name, stats)| Spec {
            kind,
            items,
            statuses,
            cursor,
            more,
            count,
            name,
            stats,
        })
}

fn first(s: &Spec) -> Item {
    s.items.first().cloned().unwrap_or(Item {
        table: 1,
        key: vec![],
        value: vec![],
        rules: RejectRules::default(),
        delta: 0,
    })
}

fn request<'a>(s: &'a Spec, it: &'a Item) -> Request<'a> {
    let t = TableId(it.table);
    match s.kind {
        0 => Request::Ping,
        1 => Request::Read { table: t, key: &it.key, rules: it.rules },
        2 => Request::Write { table: t, key: &it.key, value: &it.value, rules: it.rules },
        3 => Request::Remove { table: t, key: &it.key, rules: it.rules },
        4 => Request::Increment { table: t, key: &it.key, delta: it.delta, rules: it.rules },
        5 => Request::MultiRead(s.items.iter().map(|i| ReadItem { table: TableId(i.table), key: &i.key }).collect()),
        6 => Request::MultiWrite(
            s.items
                .iter()
                .map(|i| WriteItem { table: TableId(i.table), key: &i.key, value: &i.value, rules: i.rules })
                .collect(),
        ),
        7 => Request::MultiRemove(
            s.items.iter().map(|i| RemoveItem { table: TableId(i.table), key: &i.key, rules: i.rules }).collect(),
        ),
        8 => Request::Enumerate { table: t, cursor: s.cursor, max_count: s.count },
        9 => Request::CreateTable { name: &s.name },
        10 => Request::DropTable { name: &s.name },
        11 => Request::GetTableId { name: &s.name },
        12 => Request::Stats,
        14 => Request::WriteTtl {
            table: t,
            key: &it.key,
            value: &it.value,
            rules: it.rules,
            ttl_ms: (it.delta as u64).max(1),
        },
        15 => Request::ReadTtl { table: t, key: &it.key, rules: it.rules },
        16 => Request::ChunkCreate { table: t, payloads: s.items.iter().map(|i| &i.value[..]).collect() },
        17 => Request::ChunkGet { table: t, ids: s.items.iter().map(|i| ChunkId(i.table)).collect() },
        18 => Request::ChunkPut { table: t, items: s.items.iter().map(|i| (ChunkId(i.table), &i.value[..])).collect() },
        19 => Request::ChunkRemove { table: t, ids: s.items.iter().map(|i| ChunkId(i.delta as u64)).collect() },
        20 => Request::CreateChunkTable { name: &s.name },
        21 => Request::ChunkLock {
            table: t,
            chunk: ChunkId(it.delta as u64),
            owner: s.cursor,
            mode: if s.more { LockMode::Exclusive } else { LockMode::Shared },
            wait: it.rules.given_version.0.is_multiple_of(2),
            lease_ms: s.count,
        },
        22 => {
            Request::ChunkUnlock { table: t, chunk: ChunkId(it.delta as u64), owner: s.cursor, token: s.count.into() }
        }
        23 => Request::ChunkRenew {
            table: t,
            chunk: ChunkId(it.delta as u64),
            owner: s.cursor,
            token: it.rules.given_version.0,
            lease_ms: s.count,
        },
        24 => Request::ChunkPutLocked {
            table: t,
            chunk: ChunkId(it.delta as u64),
            owner: s.cursor,
            token: it.rules.given_version.0,
            payload: &it.value,
        },
        _ => Request::Auth { user: &it.key, password: &it.value },
    }
}

fn item_status<T>(s: &Spec, i: usize, ok: T) -> Result<T, ErrorStatus> {
    match &s.statuses[i % s.statuses.len()] {
        None => Ok(ok),
        Some(e) => Err(e.clone()),
    }
}

fn response<'a>(s: &'a Spec, it: &'a Item) -> Response<'a> {
    let v = Version(it.rules.given_version.0);
    match s.kind {
        0 => Response::Ping,
        1 => Response::Read { version: v, value: &it.value },
        2 => Response::Write { version: v },
        3 => Response::Remove { version: (v.0 != 0).then_some(v) },
        4 => Response::Increment { value: it.delta, version: v },
        5 => Response::MultiRead(
            s.items.iter().enumerate().map(|(n, i)| item_status(s, n, (i.rules.given_version, &i.value[..]))).collect(),
        ),
        6 => Response::MultiWrite(
            s.items.iter().enumerate().map(|(n, i)| item_status(s, n, i.rules.given_version)).collect(),
        ),
        7 => Response::MultiRemove(
            s.items
                .iter()
                .enumerate()
                .map(|(n, i)| item_status(s, n, (i.rules.given_version.0 != 0).then_some(i.rules.given_version)))
                .collect(),
        ),
        8 => Response::Enumerate {
            objects: s
                .items
                .iter()
                .map(|i| Object { key: &i.key, value: &i.value, version: i.rules.given_version })
                .collect(),
            next: s.more.then_some(s.cursor),
        },
        9 => Response::CreateTable { table: TableId(it.table) },
        10 => Response::DropTable,
        11 => Response::GetTableId { table: TableId(it.table) },
        13 => Response::Auth,
        14 => Response::WriteTtl { version: v },
        15 => Response::ReadTtl {
            version: v,
            expires_at: (s.cursor != 0).then_some(UnixMillis(s.cursor)),
            ttl_ms: s.count as u64,
        },
        16 => Response::ChunkCreate(s.items.iter().map(|i| ChunkId(i.table)).collect()),
        17 => Response::ChunkGet(
            s.items.iter().enumerate().map(|(n, i)| item_status(s, n, (i.rules.given_version, &i.value[..]))).collect(),
        ),
        18 => Response::ChunkPut(
            s.items.iter().enumerate().map(|(n, i)| item_status(s, n, i.rules.given_version)).collect(),
        ),
        19 => Response::ChunkRemove(
            s.items.iter().enumerate().map(|(n, i)| item_status(s, n, i.rules.given_version)).collect(),
        ),
        20 => Response::CreateChunkTable { table: TableId(it.table) },
        21 => Response::ChunkLock { token: s.cursor, lease_ms: s.count },
        22 => Response::ChunkUnlock,
        23 => Response::ChunkRenew { lease_ms: s.count },
        24 => Response::ChunkPutLocked { version: v },
        _ => Response::Stats(
            s.stats
                .iter()
                .map(|(name, f, v)| Stat {
                    name: Cow::Borrowed(name.as_str()),
                    value: if *f { StatValue::F64(*v as f64) } else { StatValue::U64(*v) },
                })
                .collect(),
        ),
    }
}

/// Decodes every whole frame of `stream`, feeding it in chunks split at the
/// given offsets, as a connection does; returns (header, body) pairs.
fn decode_stream(stream: &[u8], splits: &[usize]) -> Vec<(Header, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut from = 0;
    for &to in splits.iter().chain(std::iter::once(&stream.len())) {
        buf.extend_from_slice(&stream[from..to]);
        from = to;
        while let Some(h) = check_frame(&buf, DEFAULT_MAX_BODY_BYTES).unwrap() {
            out.push((h, buf[HEADER_LEN..h.frame_len()].to_vec()));
            buf.drain(..h.frame_len());
        }
    }
    assert!(buf.is_empty());
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn decoders_never_panic_on_random_bytes(opcode in any::<u8>(), bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = check_frame(&bytes, 64);
        let _ = check_frame(&bytes, DEFAULT_MAX_BODY_BYTES);
        let _ = Request::decode(opcode, &bytes);
        let _ = decode_response(opcode, &bytes);
        let mut framed = vec![MAGIC, PROTOCOL_VERSION];
        framed.extend_from_slice(&bytes);
        if let Ok(Some(h)) = check_frame(&framed, DEFAULT_MAX_BODY_BYTES) {
            let body = &framed[HEADER_LEN..h.frame_len()];
            let _ = Request::decode(h.opcode, body);
            let _ = decode_response(h.opcode, body);
        }
    }

    #[test]
    fn decoders_never_panic_on_mutated_frames(s in arb_spec(), at in any::<prop::sample::Index>(), byte in any::<u8>(), cut in any::<prop::sample::Index>()) {
        let it = first(&s);
        for response_side in [false, true] {
            let mut out = Vec::new();
            if response_side { response(&s, &it).encode(1, &mut out); } else { request(&s, &it).encode(1, &mut out); }
            let i = at.index(out.len());
            out[i] = byte;
            let n = cut.index(out.len() + 1);
            let body = &out[HEADER_LEN.min(n)..n];
            let _ = Request::decode(out[2], body);
            let _ = decode_response(out[2], body);
            let _ = check_frame(&out[..n], DEFAULT_MAX_BODY_BYTES);
        }
    }

    #[test]
    fn requests_round_trip(s in arb_spec(), id in any::<u64>()) {
        let it = first(&s);
        let req = request(&s, &it);
        let mut out = Vec::new();
        let n = req.encode(id, &mut out);
        prop_assert_eq!(n, out.len());
        let h = check_frame(&out, DEFAULT_MAX_BODY_BYTES).unwrap().unwrap();
        prop_assert_eq!(h.request_id, id);
        prop_assert_eq!(h.frame_len(), out.len());
        prop_assert_eq!(Request::decode(h.opcode, &out[HEADER_LEN..]).unwrap(), req);
    }

    #[test]
    fn responses_round_trip(s in arb_spec(), id in any::<u64>(), err in prop::option::of(arb_status())) {
        let it = first(&s);
        let res = match err {
            None => Ok(response(&s, &it)),
            Some(e) => Err(e),
        };
        let mut out = Vec::new();
        match &res {
            Ok(r) => r.encode(id, &mut out),
            Err(e) => encode_error(&mut out, id, request(&s, &it).opcode() as u8, e),
        };
        let h = check_frame(&out, DEFAULT_MAX_BODY_BYTES).unwrap().unwrap();
        prop_assert!(h.is_response());
        prop_assert_eq!(h.request_id, id);
        prop_assert_eq!(decode_response(h.opcode, &out[HEADER_LEN..]).unwrap(), res);
    }

    #[test]
    fn frames_split_anywhere_decode_identically(specs in prop::collection::vec(arb_spec(), 1..4)) {
        let mut stream = Vec::new();
        for (n, s) in specs.iter().enumerate() {
            let it = first(s);
            request(s, &it).encode(n as u64, &mut stream);
            response(s, &it).encode(n as u64, &mut stream);
        }
        let whole = decode_stream(&stream, &[]);
        prop_assert_eq!(whole.len(), specs.len() * 2);
        for split in 0..=stream.len() {
            prop_assert_eq!(&decode_stream(&stream, &[split]), &whole);
        }
    }
}
