//! Helpers shared by the engine's integration tests.

use shoal_engine::{EnumCursor, Store, StoreConfig, TableId, Version};
use std::collections::BTreeMap;
use std::time::Duration;

/// A store small enough that both cleaners run many times in a short test:
/// 16 KiB segments of 1 KiB seglets, `memory_kib` KiB in all.
pub fn small_config(memory_kib: usize, cleaner_thread: bool) -> StoreConfig {
    StoreConfig {
        memory_bytes: memory_kib << 10,
        segment_bytes: 16 << 10,
        seglet_bytes: 1 << 10,
        max_value_bytes: 4 << 10,
        max_key_bytes: 256,
        hash_table_buckets: Some(16),
        cleaner_thread,
        write_wait: Duration::from_secs(5),
        ..StoreConfig::default()
    }
}

/// Every object of `table`, by full enumeration with small batches; panics
/// on a key returned twice.
pub fn enumerate_all(store: &Store, table: TableId, batch: usize) -> BTreeMap<Vec<u8>, (Vec<u8>, Version)> {
    let mut out = BTreeMap::new();
    let mut cursor = Some(EnumCursor::START);
    while let Some(c) = cursor {
        let (objs, next) = store.enumerate(table, c, batch).expect("enumerate");
        for o in objs {
            let dup = out.insert(o.key.clone(), (o.value, o.version));
            assert!(dup.is_none(), "enumeration returned key {:?} twice", o.key);
        }
        cursor = next;
    }
    out
}

/// This process's resident set, from /proc (tests of memory given back to
/// the OS run alone in their own test binary).
#[allow(dead_code)]
pub fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}
