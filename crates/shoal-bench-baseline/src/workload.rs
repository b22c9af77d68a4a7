//! The workloads of Rumble thesis Table 3.1, their deterministic op
//! generator, and the binary op stream.
//!
//! A workload has three phases: (1) write new objects of the "before" size
//! distribution until half the write budget is spent, deleting random live
//! objects whenever a write would push live value bytes above the cap;
//! (2) delete a fraction of the live objects at random; (3) like (1) with
//! the "after" distribution. W1 has no phases 2 and 3: its phase 1 spends
//! the whole budget. Every write creates a new key (a 10-digit decimal
//! counter); objects are never overwritten.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::{self, Read, Write};

/// Bytes of every key: a zero-padded decimal object id.
pub const KEY_BYTES: usize = 10;

/// A value-size distribution (bytes, bounds inclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SizeDist {
    Fixed(u32),
    Uniform(u32, u32),
}

impl SizeDist {
    pub fn sample(&self, rng: &mut impl Rng) -> u32 {
        match *self {
            SizeDist::Fixed(n) => n,
            SizeDist::Uniform(lo, hi) => rng.gen_range(lo..=hi),
        }
    }

    pub fn mean(&self) -> f64 {
        match *self {
            SizeDist::Fixed(n) => n as f64,
            SizeDist::Uniform(lo, hi) => (lo as f64 + hi as f64) / 2.0,
        }
    }
}

impl std::fmt::Display for SizeDist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SizeDist::Fixed(n) => write!(f, "Fixed {n}"),
            SizeDist::Uniform(lo, hi) => write!(f, "Uniform {lo}-{hi}"),
        }
    }
}

/// One workload: the "before" distribution, the fraction deleted in phase
/// 2, and the "after" distribution (`None`: phase 1 only).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkloadSpec {
    pub name: &'static str,
    pub before: SizeDist,
    pub delete_fraction: f64,
    pub after: Option<SizeDist>,
}

/// Rumble thesis Table 3.1.
pub const WORKLOADS: [WorkloadSpec; 8] = [
    WorkloadSpec { name: "W1", before: SizeDist::Fixed(100), delete_fraction: 0.0, after: None },
    WorkloadSpec { name: "W2", before: SizeDist::Fixed(100), delete_fraction: 0.0, after: Some(SizeDist::Fixed(130)) },
    WorkloadSpec { name: "W3", before: SizeDist::Fixed(100), delete_fraction: 0.9, after: Some(SizeDist::Fixed(130)) },
    WorkloadSpec {
        name: "W4",
        before: SizeDist::Uniform(100, 150),
        delete_fraction: 0.0,
        after: Some(SizeDist::Uniform(200, 250)),
    },
    WorkloadSpec {
        name: "W5",
        before: SizeDist::Uniform(100, 150),
        delete_fraction: 0.9,
        after: Some(SizeDist::Uniform(200, 250)),
    },
    WorkloadSpec {
        name: "W6",
        before: SizeDist::Uniform(100, 200),
        delete_fraction: 0.5,
        after: Some(SizeDist::Uniform(1000, 2000)),
    },
    WorkloadSpec {
        name: "W7",
        before: SizeDist::Uniform(1000, 2000),
        delete_fraction: 0.9,
        after: Some(SizeDist::Uniform(1500, 2500)),
    },
    WorkloadSpec {
        name: "W8",
        before: SizeDist::Uniform(50, 150),
        delete_fraction: 0.9,
        after: Some(SizeDist::Uniform(5000, 15000)),
    },
];

impl WorkloadSpec {
    /// The workload named `name` (case-insensitive), if it is one of [`WORKLOADS`].
    pub fn find(name: &str) -> Option<&'static WorkloadSpec> {
        WORKLOADS.iter().find(|w| w.name.eq_ignore_ascii_case(name))
    }

    /// The smaller of the two phases' mean value sizes.
    pub fn min_mean_value_bytes(&self) -> f64 {
        self.after.map_or(self.before.mean(), |a| a.mean().min(self.before.mean()))
    }

    /// "Fixed 100 / 90% / Fixed 130", or "Fixed 100 / - / -" without phases 2 and 3.
    pub fn describe(&self) -> String {
        match self.after {
            Some(a) => format!("{} / {:.0}% / {}", self.before, self.delete_fraction * 100.0, a),
            None => format!("{} / - / -", self.before),
        }
    }
}

/// The size of a run: the cap on live value bytes, the value bytes written
/// over phases 1 and 3 together, and the seed of every random choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkloadParams {
    pub cap_bytes: u64,
    pub total_write_bytes: u64,
    pub seed: u64,
}

impl WorkloadParams {
    /// Cap 256 MiB and 1.25 GiB written, both times `scale`.
    pub fn scaled(scale: f64, seed: u64) -> WorkloadParams {
        WorkloadParams {
            cap_bytes: ((256u64 << 20) as f64 * scale) as u64,
            total_write_bytes: ((1280u64 << 20) as f64 * scale) as u64,
            seed,
        }
    }
}

/// One operation of a workload. `len` is the value's length; a delete
/// carries the length of the value it deletes so that every worker can
/// count live bytes the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Write {
        id: u64,
        len: u32,
    },
    Delete {
        id: u64,
        len: u32,
    },
    /// The phase with this number (1-3) is over.
    PhaseEnd(u8),
}

/// The key of object `id`: its 10-digit zero-padded decimal form.
pub fn key_of(id: u64) -> [u8; KEY_BYTES] {
    debug_assert!(id < 10_000_000_000);
    let mut k = [b'0'; KEY_BYTES];
    let mut n = id;
    for d in k.iter_mut().rev() {
        *d = b'0' + (n % 10) as u8;
        n /= 10;
    }
    k
}

/// Replaces `buf` with the value of object `id`: `len` copies of one byte
/// that depends on `id`.
pub fn fill_value(id: u64, len: u32, buf: &mut Vec<u8>) {
    buf.clear();
    buf.resize(len as usize, b'a' + (id % 26) as u8);
}

/// The ops of one workload run, generated lazily. Two generators with the
/// same spec and params yield the same sequence.
pub struct Generator {
    spec: WorkloadSpec,
    params: WorkloadParams,
    rng: StdRng,
    /// Live objects: (id, value length). Deletes pick a random index.
    live: Vec<(u64, u32)>,
    live_bytes: u64,
    next_id: u64,
    /// 1-3 while running; 0 when done.
    phase: u8,
    phase_written: u64,
    /// Size of the next object of phase 1 or 3, drawn before the deletes that make room for it.
    pending: Option<u32>,
    /// Deletes left in phase 2 (`None` until phase 2 starts).
    deletes_left: Option<u64>,
}

impl Generator {
    pub fn new(spec: &WorkloadSpec, params: WorkloadParams) -> Generator {
        let name_hash =
            spec.name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3));
        Generator {
            spec: *spec,
            params,
            rng: StdRng::seed_from_u64(params.seed ^ name_hash),
            live: Vec::new(),
            live_bytes: 0,
            next_id: 0,
            phase: 1,
            phase_written: 0,
            pending: None,
            deletes_left: None,
        }
    }

    /// Live value bytes after the ops yielded so far.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    fn phase_budget(&self) -> u64 {
        if self.spec.after.is_some() {
            self.params.total_write_bytes / 2
        } else {
            self.params.total_write_bytes
        }
    }

    fn delete_random(&mut self) -> Op {
        let i = self.rng.gen_range(0..self.live.len());
        let (id, len) = self.live.swap_remove(i);
        self.live_bytes -= len as u64;
        Op::Delete { id, len }
    }

    fn end_phase(&mut self) -> Op {
        let done = self.phase;
        self.phase = match (done, self.spec.after) {
            (1, Some(_)) => 2,
            (2, _) => 3,
            _ => 0,
        };
        self.phase_written = 0;
        self.pending = None;
        Op::PhaseEnd(done)
    }
}

impl Iterator for Generator {
    type Item = Op;

    fn next(&mut self) -> Option<Op> {
        match self.phase {
            1 | 3 => {
                if self.phase_written >= self.phase_budget() {
                    return Some(self.end_phase());
                }
                let dist = if self.phase == 1 { self.spec.before } else { self.spec.after.expect("phase 3") };
                let len = match self.pending {
                    Some(len) => len,
                    None => *self.pending.insert(dist.sample(&mut self.rng)),
                };
                if self.live_bytes + len as u64 > self.params.cap_bytes && !self.live.is_empty() {
                    return Some(self.delete_random());
                }
                self.pending = None;
                let id = self.next_id;
                self.next_id += 1;
                self.live.push((id, len));
                self.live_bytes += len as u64;
                self.phase_written += len as u64;
                Some(Op::Write { id, len })
            }
            2 => {
                let fraction = self.spec.delete_fraction;
                let n = self.live.len();
                let left = self.deletes_left.get_or_insert_with(|| (n as f64 * fraction).round() as u64);
                if *left > 0 {
                    *left -= 1;
                    Some(self.delete_random())
                } else {
                    Some(self.end_phase())
                }
            }
            _ => None,
        }
    }
}

const OP_BYTES: usize = 13;
const TAG_WRITE: u8 = 1;
const TAG_DELETE: u8 = 2;
const TAG_PHASE_END: u8 = 3;

fn encode(op: Op, out: &mut [u8; OP_BYTES]) {
    let (tag, id, len) = match op {
        Op::Write { id, len } => (TAG_WRITE, id, len),
        Op::Delete { id, len } => (TAG_DELETE, id, len),
        Op::PhaseEnd(p) => (TAG_PHASE_END, p as u64, 0),
    };
    out[0] = tag;
    out[1..9].copy_from_slice(&id.to_le_bytes());
    out[9..13].copy_from_slice(&len.to_le_bytes());
}

/// Writes `ops` to `out` in the op stream format (13 bytes per op: tag,
/// id as u64 LE, length as u32 LE). Returns the number of ops written.
pub fn write_ops(ops: impl IntoIterator<Item = Op>, out: impl Write) -> io::Result<u64> {
    let mut out = io::BufWriter::with_capacity(1 << 20, out);
    let mut buf = [0u8; OP_BYTES];
    let mut n = 0;
    for op in ops {
        encode(op, &mut buf);
        out.write_all(&buf)?;
        n += 1;
    }
    out.flush()?;
    Ok(n)
}

/// Reads an op stream written by [`write_ops`].
pub struct OpReader<R: Read> {
    input: io::BufReader<R>,
}

impl<R: Read> OpReader<R> {
    pub fn new(input: R) -> Self {
        OpReader { input: io::BufReader::with_capacity(1 << 20, input) }
    }

    /// The next op; `None` at the end of the stream. A stream that ends
    /// inside an op, or an unknown tag, is an error.
    pub fn next_op(&mut self) -> io::Result<Option<Op>> {
        let mut buf = [0u8; OP_BYTES];
        let mut got = 0;
        while got < OP_BYTES {
            match self.input.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Ok(None),
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "op stream ends inside an op")),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let id = u64::from_le_bytes(buf[1..9].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(buf[9..13].try_into().expect("4 bytes"));
        match buf[0] {
            TAG_WRITE => Ok(Some(Op::Write { id, len })),
            TAG_DELETE => Ok(Some(Op::Delete { id, len })),
            TAG_PHASE_END => Ok(Some(Op::PhaseEnd(id as u8))),
            t => Err(io::Error::new(io::ErrorKind::InvalidData, format!("unknown op tag {t}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn small() -> WorkloadParams {
        WorkloadParams { cap_bytes: 200_000, total_write_bytes: 1_000_000, seed: 7 }
    }

    #[test]
    fn keys_are_ten_digit_counters() {
        assert_eq!(&key_of(0), b"0000000000");
        assert_eq!(&key_of(1234567890), b"1234567890");
    }

    #[test]
    fn generator_is_deterministic() {
        let spec = WorkloadSpec::find("w5").unwrap();
        let a: Vec<Op> = Generator::new(spec, small()).collect();
        let b: Vec<Op> = Generator::new(spec, small()).collect();
        assert_eq!(a, b);
        let c: Vec<Op> = Generator::new(spec, WorkloadParams { seed: 8, ..small() }).collect();
        assert_ne!(a, c);
    }

    /// Replays every workload against a model: deletes name live objects
    /// with their true length, live bytes stay under the cap, phases end in
    /// order, phase 2 deletes the given fraction and the budget is spent.
    #[test]
    fn every_workload_respects_its_contract() {
        let p = small();
        for spec in &WORKLOADS {
            let mut live: HashMap<u64, u32> = HashMap::new();
            let (mut live_bytes, mut written, mut phases) = (0u64, 0u64, Vec::new());
            let mut before_phase2 = 0;
            let mut deleted_in_phase2 = 0;
            for op in Generator::new(spec, p) {
                match op {
                    Op::Write { id, len } => {
                        assert!(live.insert(id, len).is_none(), "{}: id {id} reused", spec.name);
                        live_bytes += len as u64;
                        written += len as u64;
                        assert!(live_bytes <= p.cap_bytes, "{}: live {live_bytes} above cap", spec.name);
                    }
                    Op::Delete { id, len } => {
                        assert_eq!(live.remove(&id), Some(len), "{}: bad delete of {id}", spec.name);
                        live_bytes -= len as u64;
                        if phases.len() == 1 {
                            deleted_in_phase2 += 1;
                        }
                    }
                    Op::PhaseEnd(n) => {
                        if n == 1 {
                            before_phase2 = live.len();
                        }
                        phases.push(n);
                    }
                }
            }
            if spec.after.is_some() {
                assert_eq!(phases, vec![1, 2, 3], "{}", spec.name);
                let want = (before_phase2 as f64 * spec.delete_fraction).round() as usize;
                assert_eq!(deleted_in_phase2, want, "{}", spec.name);
            } else {
                assert_eq!(phases, vec![1], "{}", spec.name);
            }
            assert!(written >= p.total_write_bytes && written < p.total_write_bytes + 40_000, "{}", spec.name);
        }
    }

    #[test]
    fn op_stream_round_trips() {
        let ops: Vec<Op> = Generator::new(&WORKLOADS[7], small()).collect();
        let mut buf = Vec::new();
        assert_eq!(write_ops(ops.iter().copied(), &mut buf).unwrap(), ops.len() as u64);
        let mut r = OpReader::new(&buf[..]);
        let mut back = Vec::new();
        while let Some(op) = r.next_op().unwrap() {
            back.push(op);
        }
        assert_eq!(ops, back);
        assert!(OpReader::new(&buf[..5]).next_op().is_err());
    }
}
