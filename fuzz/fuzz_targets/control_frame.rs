//! Coordinator control frames (`shoal-cluster`, `control`): a length
//! prefix and JSON, read with `read_frame_limited` as the coordinator reads
//! requests and as servers and clients read its responses.
//!
//! Asserts: no panic; a body over the limit is refused before it is read;
//! a frame that decodes, written back with `write_frame`, is a frame of the
//! same length prefix layout that reads back to an equal message (JSON is
//! not canonical: equality is of the decoded messages), and a second
//! encoding equals the first.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Serialize;
use shoal_cluster::control::{read_frame_limited, write_frame, ControlError};
use shoal_cluster::{ControlRequest, ControlResponse};
use std::fmt::Debug;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

const LIMIT: usize = 1 << 16;

/// Runs a future over in-memory bytes, which never waits.
fn now<T>(f: impl Future<Output = T>) -> T {
    match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("in-memory I/O is never pending"),
    }
}

fn check<T: DeserializeOwned + Serialize + PartialEq + Debug>(data: &[u8]) {
    let declared = data.get(..4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize);
    let msg = match now(read_frame_limited::<T, _>(&mut &data[..], LIMIT)) {
        Ok(Some(m)) => m,
        Ok(None) => return assert!(data.len() < 4),
        Err(ControlError::TooLarge(n)) => return assert_eq!(Some(n), declared.filter(|&d| d > LIMIT)),
        Err(_) => return,
    };
    let mut out = Vec::new();
    now(write_frame(&mut out, &msg)).expect("a decoded message encodes");
    assert_eq!(out.len(), 4 + u32::from_le_bytes(out[..4].try_into().expect("4 bytes")) as usize);
    let back: T = now(read_frame_limited(&mut &out[..], usize::MAX)).expect("re-reads").expect("a frame");
    assert_eq!(back, msg, "a control message does not survive a round trip");
    let mut again = Vec::new();
    now(write_frame(&mut again, &back)).expect("encodes");
    assert_eq!(again, out, "encoding is not deterministic");
}

fuzz_target!(|data: &[u8]| {
    check::<ControlRequest>(data);
    check::<ControlResponse>(data);
});
