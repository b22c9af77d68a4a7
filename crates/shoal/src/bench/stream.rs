//! `shoal bench stream`: append and read-back throughput of a stream on a
//! running server or cluster (KerA, Fig. 5.7-5.8), with the client
//! library's [`Producer`] and [`Consumer`].
//!
//! A fresh stream is created (`--streamlets`, `--logs` per streamlet).
//! `--producers` tasks, each with its own client (its own connections) and
//! producer id `0..P` (so producer `p` appends to log `p % Q` of each
//! streamlet), send records of `--record-size` bytes through a `Producer`
//! whose batches hold exactly `--batch` records (its `batch_bytes` set to
//! `batch x (record + 5)`, its linger longer than the run), with at most
//! `--in-flight` PRODUCE requests unanswered each. The phase ends at
//! `--records` (all producers together) or `--duration`, whichever comes
//! first, and once every batch is answered. A batch's latency runs from
//! the moment its first record is handed to the producer to its
//! acknowledgement (durable: at R=0, in the master's memory).
//!
//! The consume phase then reads every streamlet back with one `Consumer`
//! (own client) per streamlet, until it has read as many records as were
//! acknowledged in that streamlet. With `--e2e` the consumers instead run
//! while the producers write, and each record's first 8 bytes (the time it
//! was handed to the producer) give its produce-to-consume latency.
//! With `--round-trip` one producer and one consumer take turns, as
//! Kafka's `EndToEndLatency` does: a record is sent, its acknowledgement
//! awaited, and the consumer polls until it has read it; then the next.

use super::{emit_json, positive, Table};
use clap::Args as ClapArgs;
use hdrhistogram::Histogram;
use serde::Serialize;
use shoal_client::{
    Ack, Client, ClientConfig, Consumer, Producer, ProducerConfig, Routing, StreamShape, TableId, MAX_PRODUCE_RECORDS,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Bytes a record counts in a `Producer`'s batch beyond its own
/// (`shoal_client::stream`'s `RECORD_COST`).
const RECORD_COST: usize = 5;
/// Consecutive empty polls (1 ms apart) after which a consumer that has
/// not read everything acknowledged gives up.
const EMPTY_POLLS: u32 = 2000;

/// Options of `shoal bench stream`.
#[derive(ClapArgs, Clone, Debug)]
pub struct Args {
    /// A standalone server's native address.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:7700", conflicts_with = "coordinator")]
    pub server: String,
    /// A cluster's coordinator(s): streamlets are reached through the
    /// cluster's tablet map.
    #[arg(long, value_name = "IP:PORT[,IP:PORT...]")]
    pub coordinator: Option<shoal_cluster::CoordinatorAddrs>,
    /// Name of the stream to create (default: bench.stream.<unix ms>, a
    /// fresh one per run). An existing stream of that name and shape is
    /// reused, and its older records then make the consume phase report
    /// a mismatch.
    #[arg(long)]
    pub stream: Option<String>,
    /// Streamlets of the stream.
    #[arg(long, default_value_t = 1)]
    pub streamlets: u32,
    /// Logs of each streamlet's MultiLog (Q; 0: the server's --stream-logs).
    #[arg(long, visible_alias = "stream-logs", default_value_t = 1)]
    pub logs: u32,
    /// Producer tasks, each with its own client and producer id.
    #[arg(long, default_value_t = 1)]
    pub producers: u32,
    /// Records per PRODUCE request (the producer's batch).
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// Bytes of each record (at least 8 with --e2e).
    #[arg(long, default_value_t = 100)]
    pub record_size: usize,
    /// Most PRODUCE requests unanswered per producer.
    #[arg(long, default_value_t = 8)]
    pub in_flight: usize,
    /// Most records produced, all producers together.
    #[arg(long, default_value_t = 1_000_000)]
    pub records: u64,
    /// Most seconds of producing (and, separately, of consuming).
    #[arg(long, default_value_t = 30.0)]
    pub duration: f64,
    /// Bytes of records asked for per CONSUME request.
    #[arg(long, default_value_t = 1 << 20)]
    pub consume_bytes: u32,
    /// Consume while producing and report produce-to-consume latency
    /// (the consume rate is then bounded by the produce rate).
    #[arg(long, conflicts_with = "round_trip")]
    pub e2e: bool,
    /// Instead of the two phases: one record at a time, produced (its
    /// acknowledgement awaited) and then read back by a consumer before
    /// the next is sent (Kafka's EndToEndLatency); produce-to-consume
    /// latency per record. --producers, --batch, --streamlets and
    /// --in-flight do not apply.
    #[arg(long)]
    pub round_trip: bool,
    /// Print one JSON object per phase instead of the table.
    #[arg(long)]
    pub json: bool,
}

/// One phase's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct StreamResult {
    pub bench: &'static str,
    /// "produce", or "consume" (after producing), or "consume_e2e" (while
    /// producing; latencies are produce-to-consume), or "round_trip"
    /// (`--round-trip`).
    pub phase: &'static str,
    pub streamlets: u32,
    pub logs: u32,
    pub producers: u32,
    pub batch: usize,
    pub record_bytes: usize,
    pub in_flight: usize,
    pub records: u64,
    pub secs: f64,
    pub records_per_sec: f64,
    /// Record bytes per second / 10^6.
    pub mb_per_sec: f64,
    /// Produce: per batch, first record handed over to acknowledgement.
    /// Consume e2e: per record, handed to the producer to read.
    pub latency_samples: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    /// `None` when the phase completed with every record accounted for.
    pub error: Option<String>,
}

fn histogram() -> Histogram<u64> {
    Histogram::<u64>::new_with_bounds(1, 600_000_000_000, 3).expect("histogram bounds")
}

/// What one producer task did.
struct Produced {
    acked: u64,
    /// Acknowledged records per streamlet.
    per_streamlet: Vec<u64>,
    hist: Histogram<u64>,
    error: Option<String>,
}

/// One producer: hands `n` records to a `Producer` (stopping early at
/// `deadline`), a batch's last `Ack` going to a task that waits for it.
#[allow(clippy::too_many_arguments)]
async fn produce(
    client: Client,
    table: TableId,
    shape: StreamShape,
    id: u64,
    a: &Args,
    n: u64,
    deadline: Instant,
    epoch: Instant,
) -> Produced {
    let config = ProducerConfig {
        id,
        batch_bytes: a.batch * (a.record_size + RECORD_COST),
        // Longer than any run: batches close by size (or at the final flush).
        linger: Duration::from_secs(3600),
        max_in_flight: a.in_flight,
        routing: Routing::RoundRobin,
    };
    let producer = Producer::new(client, table, shape, config);
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, u64, Ack)>();
    let streamlets = shape.streamlets.max(1) as usize;
    let waiter = tokio::spawn(async move {
        let mut out = Produced { acked: 0, per_streamlet: vec![0; streamlets], hist: histogram(), error: None };
        while let Some((t0, count, ack)) = rx.recv().await {
            match ack.wait().await {
                Ok((s, _)) => {
                    out.hist.saturating_record((t0.elapsed().as_nanos() as u64).max(1));
                    out.acked += count;
                    if let Some(c) = out.per_streamlet.get_mut(s as usize) {
                        *c += count;
                    }
                }
                Err(e) => {
                    out.error.get_or_insert_with(|| format!("producer {id}: {e}"));
                }
            }
        }
        out
    });
    let mut sent = 0;
    while sent < n && Instant::now() < deadline {
        let count = (a.batch as u64).min(n - sent);
        let t0 = Instant::now();
        let mut last = None;
        for _ in 0..count {
            let mut record = vec![b'x'; a.record_size];
            if a.record_size >= 8 {
                record[..8].copy_from_slice(&(epoch.elapsed().as_nanos() as u64).to_le_bytes());
            }
            last = Some(producer.send(None, record).await);
        }
        sent += count;
        if let Some(ack) = last {
            let _ = tx.send((t0, count, ack));
        }
    }
    producer.flush().await;
    drop(tx);
    waiter.await.unwrap_or_else(|e| Produced {
        acked: 0,
        per_streamlet: Vec::new(),
        hist: histogram(),
        error: Some(format!("producer {id}: {e}")),
    })
}

/// What one consumer task read.
struct Consumed {
    records: u64,
    hist: Histogram<u64>,
    error: Option<String>,
}

/// Reads streamlet `s` until it has read the records acknowledged there
/// (`want`, `u64::MAX` while unknown), `deadline` passes, or
/// [`EMPTY_POLLS`] polls in a row find nothing once `want` is known.
async fn consume(
    client: Client,
    table: TableId,
    s: u32,
    a: &Args,
    want: Arc<AtomicU64>,
    deadline: Instant,
    epoch: Instant,
) -> Consumed {
    let mut c = Consumer::new(client, table, s, a.consume_bytes);
    let mut out = Consumed { records: 0, hist: histogram(), error: None };
    let mut empty = 0;
    loop {
        let w = want.load(Ordering::Acquire);
        if out.records >= w {
            break;
        }
        if Instant::now() >= deadline {
            out.error = Some(format!("streamlet {s}: read {} records before the deadline", out.records));
            break;
        }
        let got = match c.poll().await {
            Ok(r) => r,
            Err(e) => {
                out.error = Some(format!("streamlet {s}: {e}"));
                break;
            }
        };
        if got.is_empty() {
            if w != u64::MAX {
                empty += 1;
                if empty >= EMPTY_POLLS {
                    out.error = Some(format!("streamlet {s}: read {} of {w} acknowledged records", out.records));
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        empty = 0;
        if a.e2e {
            let now = epoch.elapsed().as_nanos() as u64;
            for r in &got {
                if let Some(stamp) = r.get(..8) {
                    let t = u64::from_le_bytes(stamp.try_into().expect("8 bytes"));
                    out.hist.saturating_record(now.saturating_sub(t).max(1));
                }
            }
        }
        out.records += got.len() as u64;
    }
    out
}

async fn connect(a: &Args) -> Result<Client, String> {
    match &a.coordinator {
        Some(c) => Client::connect_cluster(c.clone(), ClientConfig::default())
            .await
            .map_err(|e| format!("cluster at {c}: {e}")),
        None => Client::connect(a.server.as_str()).await.map_err(|e| format!("server {}: {e}", a.server)),
    }
}

fn result(a: &Args, logs: u32, phase: &'static str, records: u64, secs: f64, hist: &Histogram<u64>) -> StreamResult {
    let secs = secs.max(1e-9);
    let us = |ns: u64| ns as f64 / 1000.0;
    let empty = hist.is_empty();
    StreamResult {
        bench: "stream",
        phase,
        streamlets: a.streamlets,
        logs,
        producers: a.producers,
        batch: a.batch,
        record_bytes: a.record_size,
        in_flight: a.in_flight,
        records,
        secs,
        records_per_sec: records as f64 / secs,
        mb_per_sec: (records * a.record_size as u64) as f64 / secs / 1e6,
        latency_samples: hist.len(),
        p50_us: if empty { 0.0 } else { us(hist.value_at_quantile(0.5)) },
        p99_us: if empty { 0.0 } else { us(hist.value_at_quantile(0.99)) },
        max_us: if empty { 0.0 } else { us(hist.max()) },
        error: None,
    }
}

/// `--round-trip`: one record at a time, sent, acknowledged and read back
/// before the next; each record's latency from its send to its read.
async fn round_trip(a: &Args, table: TableId, shape: StreamShape) -> Result<StreamResult, String> {
    let config = ProducerConfig {
        id: 0,
        batch_bytes: 1,
        linger: Duration::from_secs(3600),
        max_in_flight: 1,
        routing: Routing::RoundRobin,
    };
    let producer = Producer::new(connect(a).await?, table, shape, config);
    let mut consumer = Consumer::new(connect(a).await?, table, 0, a.consume_bytes);
    let mut hist = histogram();
    let mut error = None;
    let (started, mut n) = (Instant::now(), 0);
    let deadline = started + Duration::from_secs_f64(a.duration);
    'records: while n < a.records && Instant::now() < deadline {
        let t0 = Instant::now();
        // A batch of one record: sent at once.
        if let Err(e) = producer.send(None, vec![b'x'; a.record_size]).await.wait().await {
            error = Some(format!("record {n}: {e}"));
            break;
        }
        loop {
            match consumer.poll().await {
                Ok(got) if got.is_empty() => {}
                Ok(got) if got.len() == 1 => break,
                Ok(got) => {
                    error = Some(format!("record {n}: read {} records, sent one", got.len()));
                    break 'records;
                }
                Err(e) => {
                    error = Some(format!("record {n}: {e}"));
                    break 'records;
                }
            }
            if Instant::now() >= deadline {
                error = Some(format!("record {n} was not read before the deadline"));
                break 'records;
            }
        }
        hist.saturating_record((t0.elapsed().as_nanos() as u64).max(1));
        n += 1;
    }
    let mut r = result(a, shape.logs, "round_trip", n, started.elapsed().as_secs_f64(), &hist);
    r.producers = 1;
    r.streamlets = 1;
    r.batch = 1;
    r.in_flight = 1;
    r.error = error;
    Ok(r)
}

/// Starts one consumer task per streamlet, each with its own client.
fn start_consumers(
    a: &Arc<Args>,
    table: TableId,
    wants: &[Arc<AtomicU64>],
    deadline: Instant,
    epoch: Instant,
) -> Vec<tokio::task::JoinHandle<Consumed>> {
    (0..wants.len() as u32)
        .map(|s| {
            let (a, want) = (a.clone(), wants[s as usize].clone());
            tokio::spawn(async move {
                match connect(&a).await {
                    Ok(c) => consume(c, table, s, &a, want, deadline, epoch).await,
                    Err(e) => Consumed { records: 0, hist: histogram(), error: Some(e) },
                }
            })
        })
        .collect()
}

async fn run_async(a: Arc<Args>) -> Result<Vec<StreamResult>, String> {
    let admin = connect(&a).await?;
    let name = a.stream.clone().unwrap_or_else(|| {
        let ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        format!("bench.stream.{ms}")
    });
    let asked = StreamShape {
        streamlets: if a.round_trip { 1 } else { a.streamlets },
        logs: a.logs,
        segment_bytes: 0,
        group_segments: 0,
        group_timeout_ms: 0,
    };
    let (table, shape) = admin.create_stream(&name, asked).await.map_err(|e| format!("creating stream {name}: {e}"))?;
    if !a.json && a.round_trip {
        println!(
            "stream '{name}': {} log(s); one record of {} B at a time, produced and read back; \
             at most {} records and {:.0} s",
            shape.logs, a.record_size, a.records, a.duration
        );
    } else if !a.json {
        println!(
            "stream '{name}': {} streamlet(s) x {} log(s); {} producer(s), batches of {} records of {} B, \
             {} in flight each; at most {} records and {:.0} s",
            shape.streamlets, shape.logs, a.producers, a.batch, a.record_size, a.in_flight, a.records, a.duration
        );
    }
    if a.round_trip {
        return Ok(vec![round_trip(&a, table, shape).await?]);
    }
    let epoch = Instant::now();
    let wants: Vec<Arc<AtomicU64>> = (0..shape.streamlets).map(|_| Arc::new(AtomicU64::new(u64::MAX))).collect();
    let time = Duration::from_secs_f64(a.duration);

    // With --e2e the consumers start first and read while records come in.
    let mut consumers = Vec::new();
    if a.e2e {
        consumers = start_consumers(&a, table, &wants, Instant::now() + 2 * time + Duration::from_secs(10), epoch);
    }
    let mut clients = Vec::new();
    for _ in 0..a.producers {
        clients.push(connect(&a).await?);
    }
    let started = Instant::now();
    let deadline = started + time;
    let (per, extra) = (a.records / u64::from(a.producers), a.records % u64::from(a.producers));
    let producers: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(p, client)| {
            let a = a.clone();
            let n = per + u64::from((p as u64) < extra);
            tokio::spawn(async move { produce(client, table, shape, p as u64, &a, n, deadline, epoch).await })
        })
        .collect();
    let (mut acked, mut hist, mut errors) = (0, histogram(), Vec::new());
    let mut per_streamlet = vec![0u64; shape.streamlets as usize];
    for p in producers {
        let out = p.await.map_err(|e| format!("producer task: {e}"))?;
        acked += out.acked;
        for (t, c) in per_streamlet.iter_mut().zip(&out.per_streamlet) {
            *t += c;
        }
        hist.add(&out.hist).map_err(|e| e.to_string())?;
        errors.extend(out.error);
    }
    let mut produced = result(&a, shape.logs, "produce", acked, started.elapsed().as_secs_f64(), &hist);
    produced.error = errors.into_iter().next();

    let read_started = Instant::now();
    for (w, n) in wants.iter().zip(&per_streamlet) {
        w.store(*n, Ordering::Release);
    }
    if !a.e2e {
        consumers = start_consumers(&a, table, &wants, read_started + time, epoch);
    }
    let (mut read, mut hist, mut error) = (0, histogram(), None);
    for c in consumers {
        let out = c.await.map_err(|e| format!("consumer task: {e}"))?;
        read += out.records;
        hist.add(&out.hist).map_err(|e| e.to_string())?;
        if error.is_none() {
            error = out.error;
        }
    }
    // Without --e2e the phase is timed from its own start; with it, from
    // the producers' start (the consumers read all along).
    let (phase, secs) = match a.e2e {
        true => ("consume_e2e", started.elapsed()),
        false => ("consume", read_started.elapsed()),
    };
    let mut consumed = result(&a, shape.logs, phase, read, secs.as_secs_f64(), &hist);
    if error.is_none() && read != acked {
        error = Some(format!("read {read} records, {acked} were acknowledged"));
    }
    consumed.error = error;
    Ok(vec![produced, consumed])
}

fn print_table(results: &[StreamResult]) {
    let mut t =
        Table::new(&["phase", "records", "secs", "records/s", "MB/s", "p50 us", "p99 us", "max us", "error"], 1);
    for r in results {
        t.row(vec![
            r.phase.to_string(),
            r.records.to_string(),
            format!("{:.2}", r.secs),
            format!("{:.0}", r.records_per_sec),
            format!("{:.1}", r.mb_per_sec),
            format!("{:.0}", r.p50_us),
            format!("{:.0}", r.p99_us),
            format!("{:.0}", r.max_us),
            r.error.clone().unwrap_or_default(),
        ]);
    }
    print!("{}", t.render());
}

/// Runs the benchmark; false if a phase failed or lost records.
pub fn run(a: &Args) -> Result<bool, String> {
    if a.producers == 0 || a.streamlets == 0 || a.records == 0 || a.in_flight == 0 {
        return Err("--producers, --streamlets, --records and --in-flight must be positive".into());
    }
    if a.batch == 0 || a.batch > MAX_PRODUCE_RECORDS {
        return Err(format!("--batch must be 1-{MAX_PRODUCE_RECORDS}"));
    }
    if a.record_size == 0 || (a.e2e && a.record_size < 8) {
        return Err("--record-size must be positive (at least 8 with --e2e)".into());
    }
    if !positive(a.duration) {
        return Err("--duration must be positive".into());
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let results = rt.block_on(run_async(Arc::new(a.clone())))?;
    if a.json {
        results.iter().for_each(emit_json);
    } else {
        print_table(&results);
    }
    Ok(results.iter().all(|r| r.error.is_none()))
}
