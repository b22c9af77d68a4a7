//! The read path's cost is unchanged by expiry for objects without one: a
//! read into a reused buffer allocates nothing (and, see `expiry.rs`,
//! reads no clock). Counts this thread's heap allocations with a counting
//! global allocator; the store's own threads are not counted. The objects
//! fit in the first seglet: an entry that straddles two seglets is copied
//! out to be read (`Segments::entry`), expiry or not.

use shoal_engine::{RejectRules, Store, StoreConfig, TableId, UnixMillis};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::time::Duration;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; the
// counter is a thread-local `Cell` that never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(|n| n.get())
}

#[test]
fn reads_of_objects_with_or_without_expiry_allocate_nothing() {
    let config = StoreConfig {
        memory_bytes: 64 << 20,
        expiry_sweep_interval: Duration::ZERO,
        cleaner_thread: false,
        ..StoreConfig::default()
    };
    let store = Store::new(config).unwrap();
    let t = TableId(1);
    store.create_table(t);
    let far = shoal_engine::Expiry::At(UnixMillis::now().plus_ms(3_600_000));
    for i in 0..500u32 {
        store.write(t, &i.to_le_bytes(), b"a small value", RejectRules::default()).unwrap();
        let key = (i + 1_000_000).to_le_bytes();
        store.write_with_expiry(t, &key, b"a small value", RejectRules::default(), far).unwrap();
    }
    let mut out = Vec::with_capacity(64);
    store.read_into(t, &0u32.to_le_bytes(), RejectRules::default(), &mut out).unwrap();
    let before = allocations();
    for i in 0..500u32 {
        store.read_into(t, &i.to_le_bytes(), RejectRules::default(), &mut out).unwrap();
        store.read_into(t, &(i + 1_000_000).to_le_bytes(), RejectRules::default(), &mut out).unwrap();
    }
    assert_eq!(allocations() - before, 0, "reads allocated");
}
