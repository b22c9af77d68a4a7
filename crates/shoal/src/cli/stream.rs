//! `shoal stream create/produce/consume/describe` (`docs/streams.md`),
//! through the blocking client.

use super::{lookup, lossy, show_value, CliError, Common, Target, USAGE};
use clap::{Args, Subcommand};
use serde_json::json;
use shoal_client::blocking::Client;
use shoal_client::{key_hash, Consumed, StreamError, StreamOffset, StreamShape, Subscriber, MAX_PRODUCE_RECORDS};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{BufRead, Write};
use std::os::unix::ffi::OsStrExt;

#[derive(Subcommand, Debug)]
pub enum StreamCommand {
    /// Creates a stream (or finds the existing one of that name and shape);
    /// prints its id and shape.
    Create(CreateArgs),
    /// Appends records to a streamlet: the RECORD arguments as one batch,
    /// or without any, the lines of stdin in batches of --batch-bytes.
    /// Prints where the records went once they are durable.
    Produce(ProduceArgs),
    /// Prints the records of a streamlet: every group from the first, each
    /// log's groups in order (or with --from, one group from an offset),
    /// then the offset to continue from.
    Consume(ConsumeArgs),
    /// Prints a stream's shape and the groups of its streamlets.
    Describe(DescribeArgs),
}

impl StreamCommand {
    pub fn common(&self) -> &Common {
        match self {
            StreamCommand::Create(a) => &a.common,
            StreamCommand::Produce(a) => &a.common,
            StreamCommand::Consume(a) => &a.common,
            StreamCommand::Describe(a) => &a.common,
        }
    }
}

#[derive(Args, Debug)]
pub struct CreateArgs {
    pub name: String,
    /// Streamlets (fixed for the stream's life).
    #[arg(long, default_value_t = 1)]
    pub streamlets: u32,
    /// Logs of each streamlet's MultiLog [default: the server's --stream-logs].
    #[arg(long, default_value_t = 0)]
    pub logs: u32,
    /// Bytes of records a stream segment holds [default: 1 MiB].
    #[arg(long, default_value_t = 0)]
    pub segment_bytes: u32,
    /// Segments of a group [default: 4].
    #[arg(long, default_value_t = 0)]
    pub group_segments: u32,
    /// A group also closes this many ms after it opened (0: never by time).
    #[arg(long, default_value_t = 0)]
    pub group_timeout_ms: u64,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct ProduceArgs {
    pub stream: String,
    /// The records (none: read lines from stdin).
    pub records: Vec<OsString>,
    /// The streamlet to append to.
    #[arg(long, default_value_t = 0, conflicts_with = "key")]
    pub streamlet: u32,
    /// Route by this key instead: its hash picks the streamlet.
    #[arg(long)]
    pub key: Option<OsString>,
    /// The producer id: its records go to log id % logs of the streamlet.
    #[arg(long, default_value_t = 0)]
    pub producer: u64,
    /// From stdin: send a batch once it holds this many bytes.
    #[arg(long, default_value_t = 64 << 10)]
    pub batch_bytes: usize,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct ConsumeArgs {
    pub stream: String,
    #[arg(long, default_value_t = 0)]
    pub streamlet: u32,
    /// Read one group from this offset: GROUP or GROUP:SEGMENT:POSITION.
    #[arg(long)]
    pub from: Option<StreamOffset>,
    /// Bytes of records asked for per request.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_bytes: u32,
    /// Stop after this many records.
    #[arg(long)]
    pub limit: Option<u64>,
    /// Read as an instance of this consumer name: the server hands out
    /// groups no other live instance of the name holds, from the name's
    /// committed offsets, and the offsets of what is printed are committed
    /// (docs/streams.md, "Consumer names").
    #[arg(long, conflicts_with = "from")]
    pub name: Option<String>,
    /// With --name: this instance's id [default: the process id].
    #[arg(long, requires = "name")]
    pub instance: Option<u64>,
    /// With --name: the lease on a group, in ms.
    #[arg(long, default_value_t = 10_000, requires = "name")]
    pub lease_ms: u32,
    #[command(flatten)]
    pub common: Common,
}

#[derive(Args, Debug)]
pub struct DescribeArgs {
    pub stream: String,
    /// Only this streamlet (default: every one).
    #[arg(long)]
    pub streamlet: Option<u32>,
    #[command(flatten)]
    pub common: Common,
}

impl Target<'_> {
    fn stream_error(&self, e: StreamError) -> CliError {
        match e {
            StreamError::UnknownTable(id) => self.unknown_table(id),
            StreamError::Invalid(why) => CliError::refused("refused", format!("{}: {why}", self.table)),
            StreamError::OutOfMemory => {
                CliError::refused("out_of_memory", "the server is out of memory: live data fills it")
            }
            StreamError::NotHeld => CliError::refused("lease_lost", e.to_string()),
            StreamError::Client(e) => self.client(e),
        }
    }
}

/// Most groups asked for per DESCRIBE_STREAM.
const DESCRIBE_PAGE: u32 = 1000;

pub fn run(c: &mut Client, cmd: &StreamCommand, server: &str, json: bool) -> Result<(), CliError> {
    match cmd {
        StreamCommand::Create(a) => {
            let t = Target { server, table: &a.name, key: None };
            let asked = StreamShape {
                streamlets: a.streamlets,
                logs: a.logs,
                segment_bytes: a.segment_bytes,
                group_segments: a.group_segments,
                group_timeout_ms: a.group_timeout_ms,
            };
            let (id, shape) = c.create_stream(&a.name, asked).map_err(|e| t.stream_error(e))?;
            if json {
                out!("{}", json!({ "stream": a.name, "id": id.0, "shape": shape_json(&shape) }));
            } else {
                out!("stream '{}' has id {id}: {}", a.name, show_shape(&shape));
            }
        }
        StreamCommand::Produce(a) => produce(c, a, server, json)?,
        StreamCommand::Consume(a) => consume(c, a, server, json)?,
        StreamCommand::Describe(a) => {
            let t = Target { server, table: &a.stream, key: None };
            let table = lookup(c, &t)?;
            let first = c.describe_stream(table, a.streamlet.unwrap_or(0), 0, 0).map_err(|e| t.stream_error(e))?;
            let shape = first.shape;
            if json {
                out!("{}", json!({ "stream": a.stream, "id": table.0, "shape": shape_json(&shape) }));
            } else {
                out!("stream '{}' (id {table}): {}", a.stream, show_shape(&shape));
            }
            let streamlets = match a.streamlet {
                Some(s) => s..s + 1,
                None => 0..shape.streamlets,
            };
            for s in streamlets {
                let mut from = 0;
                loop {
                    let d = c.describe_stream(table, s, from, DESCRIBE_PAGE).map_err(|e| t.stream_error(e))?;
                    for g in &d.groups {
                        if json {
                            out!(
                                "{}",
                                json!({ "streamlet": s, "group": g.id, "log": g.log, "segments": g.segments,
                                        "records": g.records, "bytes": g.bytes, "closed": g.closed })
                            );
                        } else {
                            let state = if g.closed { "closed" } else { "open" };
                            out!(
                                "streamlet {s} group {}: log {}, {} segment(s), {} record(s), {} bytes, {state}",
                                g.id,
                                g.log,
                                g.segments,
                                g.records,
                                g.bytes
                            );
                        }
                    }
                    match d.groups.last() {
                        Some(g) if d.groups.len() == DESCRIBE_PAGE as usize => from = g.id + 1,
                        _ => break,
                    }
                }
            }
        }
    }
    Ok(())
}

fn show_shape(s: &StreamShape) -> String {
    let timeout = match s.group_timeout_ms {
        0 => String::new(),
        ms => format!(", groups close after {ms} ms"),
    };
    format!(
        "{} streamlet(s), {} log(s) each, segments of {} bytes, {} segment(s) per group{timeout}",
        s.streamlets, s.logs, s.segment_bytes, s.group_segments
    )
}

fn shape_json(s: &StreamShape) -> serde_json::Value {
    json!({ "streamlets": s.streamlets, "logs": s.logs, "segment_bytes": s.segment_bytes,
            "group_segments": s.group_segments, "group_timeout_ms": s.group_timeout_ms })
}

fn produce(c: &mut Client, a: &ProduceArgs, server: &str, json: bool) -> Result<(), CliError> {
    let t = Target { server, table: &a.stream, key: None };
    let table = lookup(c, &t)?;
    let streamlet = match &a.key {
        Some(k) => {
            let shape = c.describe_stream(table, 0, 0, 0).map_err(|e| t.stream_error(e))?.shape;
            (key_hash(table, k.as_bytes()).0 % u64::from(shape.streamlets.max(1))) as u32
        }
        None => a.streamlet,
    };
    let send = |c: &mut Client, records: &[Vec<u8>]| -> Result<(), CliError> {
        let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
        let p = c.produce(table, streamlet, a.producer, &refs).map_err(|e| t.stream_error(e))?;
        if json {
            out!(
                "{}",
                json!({ "stream": a.stream, "streamlet": streamlet, "first": p.first.to_string(), "count": p.count })
            );
        } else {
            out!("appended {} record(s) to streamlet {streamlet} at {}", p.count, p.first);
        }
        Ok(())
    };
    if !a.records.is_empty() {
        let records: Vec<Vec<u8>> = a.records.iter().map(|r| r.as_bytes().to_vec()).collect();
        return send(c, &records);
    }
    let mut batch: Vec<Vec<u8>> = Vec::new();
    let mut bytes = 0;
    for line in std::io::stdin().lock().split(b'\n') {
        let mut line = line.map_err(|e| CliError { kind: "input", message: format!("stdin: {e}"), code: USAGE })?;
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        bytes += line.len() + 5;
        batch.push(line);
        if bytes >= a.batch_bytes || batch.len() >= MAX_PRODUCE_RECORDS {
            send(c, &batch)?;
            batch.clear();
            bytes = 0;
        }
    }
    if !batch.is_empty() {
        send(c, &batch)?;
    }
    Ok(())
}

fn consume(c: &mut Client, a: &ConsumeArgs, server: &str, json: bool) -> Result<(), CliError> {
    let t = Target { server, table: &a.stream, key: None };
    let table = lookup(c, &t)?;
    let mut left = a.limit.unwrap_or(u64::MAX);
    if let Some(name) = &a.name {
        let instance = a.instance.unwrap_or(u64::from(std::process::id())).max(1);
        let who = Subscriber { table, streamlet: a.streamlet, name, instance, lease_ms: a.lease_ms };
        return consume_named(c, &t, who, a.max_bytes, &mut left, json);
    }
    // One group from an offset: read to what it holds now.
    if let Some(from) = a.from {
        let (mut at, mut end) = (from, false);
        while left > 0 {
            let got = c.consume(table, a.streamlet, at, a.max_bytes).map_err(|e| t.stream_error(e))?;
            at = print(&got, &mut left, json)?;
            end = got.end_of_group && at == got.next;
            if got.records.is_empty() {
                break;
            }
        }
        return done(at, end, json);
    }
    // Every group: each log's in id order, a log's next group only once
    // the one before is closed and read to its end.
    let mut groups: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut from = 0;
    loop {
        let d = c.describe_stream(table, a.streamlet, from, DESCRIBE_PAGE).map_err(|e| t.stream_error(e))?;
        for g in &d.groups {
            groups.entry(g.log).or_default().push(g.id);
        }
        match d.groups.last() {
            Some(g) if d.groups.len() == DESCRIBE_PAGE as usize => from = g.id + 1,
            _ => break,
        }
    }
    let (mut last, mut end) = (StreamOffset::default(), false);
    'logs: for ids in groups.values() {
        for &id in ids {
            let mut at = StreamOffset { group: id, segment: 0, position: 0 };
            loop {
                if left == 0 {
                    break 'logs;
                }
                let got = c.consume(table, a.streamlet, at, a.max_bytes).map_err(|e| t.stream_error(e))?;
                last = print(&got, &mut left, json)?;
                end = got.end_of_group && last == got.next;
                if got.end_of_group {
                    break;
                }
                if got.records.is_empty() {
                    // An open group read to its end: this log has no more.
                    continue 'logs;
                }
                at = got.next;
            }
        }
    }
    done(last, end, json)
}

/// `consume --name`: claims groups of the streamlet for the instance, one
/// at a time, prints what each holds now, commits the offset of what was
/// printed after each read, and gives the group back once it is done or
/// has nothing more; stops when the groups left to claim have nothing new.
fn consume_named(
    c: &mut Client,
    t: &Target<'_>,
    who: Subscriber<'_>,
    max_bytes: u32,
    left: &mut u64,
    json: bool,
) -> Result<(), CliError> {
    let err = |e| t.stream_error(e);
    let mut idle = std::collections::HashSet::new();
    while *left > 0 {
        let Some(claim) = c.claim_group(who).map_err(err)? else { break };
        let mut at = claim.from;
        if idle.contains(&at.group) {
            c.commit_group(who, at, true).map_err(err)?;
            break;
        }
        loop {
            let got = c.consume_claimed(who, at, max_bytes).map_err(err)?;
            at = print(&got, left, json)?;
            let nothing = got.records.is_empty() && !got.end_of_group;
            let stop = *left == 0 || nothing;
            if c.commit_group(who, at, stop).map_err(err)? || stop {
                if nothing {
                    idle.insert(at.group);
                }
                break;
            }
        }
    }
    if !json {
        let _ = writeln!(std::io::stderr(), "committed for consumer '{}' (instance {})", who.name, who.instance);
    }
    Ok(())
}

/// Prints a read's records (at most `left` more); the offset after the
/// last one printed. They are the last records before the read's `next`,
/// in one segment.
fn print(got: &Consumed, left: &mut u64, json: bool) -> Result<StreamOffset, CliError> {
    let n = got.records.len() as u32;
    for (i, r) in got.records.iter().enumerate() {
        if *left == 0 {
            return Ok(StreamOffset { position: got.next.position.saturating_sub(n) + i as u32, ..got.next });
        }
        *left -= 1;
        if json {
            let offset = StreamOffset { position: got.next.position.saturating_sub(n) + i as u32, ..got.next };
            out!("{}", json!({ "offset": offset.to_string(), "record": lossy(r) }));
        } else {
            out!("{}", show_value(r));
        }
    }
    Ok(got.next)
}

fn done(next: StreamOffset, end_of_group: bool, json: bool) -> Result<(), CliError> {
    if json {
        out!("{}", json!({ "next": next.to_string(), "end_of_group": end_of_group }));
    } else {
        let _ = writeln!(std::io::stderr(), "next offset: {next}{}", if end_of_group { " (end of group)" } else { "" });
    }
    Ok(())
}
