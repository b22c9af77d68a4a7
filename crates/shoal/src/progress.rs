//! Progress of long operations for people: bulk loads (`shoal load`, the
//! load phase of `shoal bench ycsb --load`) and crash recoveries watched by
//! `shoal local`.
//!
//! A [`Progress`] draws on one stream (stdout or stderr, the caller's
//! choice: commands whose stdout is their result draw on stderr). When that
//! stream is a terminal, each [`Task`] is an indicatif bar of one
//! `MultiProgress`. Otherwise the bars are never created and each task
//! prints plain lines instead, for logs and pipes: one each time it passes
//! another tenth of its total, and one every [`LINE_INTERVAL`] while it is
//! updated without passing one (or has no known total), then a last line
//! when it finishes. Tasks are `Sync`: threads may update one together.

use indicatif::{HumanBytes, HumanCount, MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest a task that is being updated goes without a plain line.
pub const LINE_INTERVAL: Duration = Duration::from_secs(5);

/// Where progress is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn is_terminal(self) -> bool {
        match self {
            Stream::Stdout => std::io::stdout().is_terminal(),
            Stream::Stderr => std::io::stderr().is_terminal(),
        }
    }

    /// Writes one line; a failed write is dropped (progress is never worth
    /// failing a command for).
    fn line(self, s: &str) {
        let _ = match self {
            Stream::Stdout => writeln!(std::io::stdout().lock(), "{s}"),
            Stream::Stderr => writeln!(std::io::stderr().lock(), "{s}"),
        };
    }
}

/// What a task counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// Bytes, shown as KiB, MiB, ...
    Bytes,
    /// Things, by this plural noun ("records", "tablets").
    Count(&'static str),
}

impl Unit {
    fn show(self, n: u64) -> String {
        match self {
            Unit::Bytes => HumanBytes(n).to_string(),
            Unit::Count(_) => HumanCount(n).to_string(),
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Unit::Bytes => "",
            Unit::Count(noun) => noun,
        }
    }
}

/// The set of tasks drawn on one stream.
pub struct Progress {
    stream: Stream,
    /// The bars' container; `None`: plain lines.
    multi: Option<MultiProgress>,
}

impl Progress {
    /// Bars if `stream` is a terminal, plain lines otherwise.
    pub fn new(stream: Stream) -> Progress {
        if stream.is_terminal() {
            let target = match stream {
                Stream::Stdout => ProgressDrawTarget::stdout(),
                Stream::Stderr => ProgressDrawTarget::stderr(),
            };
            Progress { stream, multi: Some(MultiProgress::with_draw_target(target)) }
        } else {
            Progress::plain(stream)
        }
    }

    /// Plain lines whatever the stream is.
    pub fn plain(stream: Stream) -> Progress {
        Progress { stream, multi: None }
    }

    /// Starts a task named `label` (e.g. "load 'users'") of `total` units
    /// (`None`: unknown).
    pub fn task(&self, label: impl Into<String>, total: Option<u64>, unit: Unit) -> Task {
        let label = label.into();
        let bar = self.multi.as_ref().map(|multi| {
            let bar = match total {
                Some(n) => ProgressBar::new(n),
                None => ProgressBar::new_spinner(),
            };
            let counts = match (unit, total) {
                (Unit::Bytes, Some(_)) => "{binary_bytes}/{binary_total_bytes}".to_string(),
                (Unit::Bytes, None) => "{binary_bytes}".to_string(),
                (Unit::Count(noun), Some(_)) => format!("{{human_pos}}/{{human_len}} {noun}"),
                (Unit::Count(noun), None) => format!("{{human_pos}} {noun}"),
            };
            let template = match total {
                Some(_) => format!("{{prefix}} [{{bar:30}}] {counts} ({{percent}}%) {{msg}}"),
                None => format!("{{prefix}} {{spinner}} {counts} {{msg}}"),
            };
            let style = ProgressStyle::with_template(&template).expect("valid template").progress_chars("=> ");
            let bar = multi.add(bar.with_style(style).with_prefix(label.clone()));
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        let now = Instant::now();
        Task {
            stream: self.stream,
            label,
            unit,
            bar,
            rate: false,
            started: now,
            state: Mutex::new(State { position: 0, total, message: String::new(), last_line: now, last_tenth: 0 }),
        }
    }

    /// Prints a line above the bars (or just a line).
    pub fn println(&self, line: &str) {
        match &self.multi {
            Some(multi) => {
                let _ = multi.println(line);
            }
            None => self.stream.line(line),
        }
    }

    /// Runs `f` (which writes to the terminal) with the bars cleared.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        match &self.multi {
            Some(multi) => multi.suspend(f),
            None => f(),
        }
    }
}

/// One operation's progress: a bar, or plain lines.
pub struct Task {
    stream: Stream,
    label: String,
    unit: Unit,
    bar: Option<ProgressBar>,
    /// Show units per second since the start before the message.
    rate: bool,
    started: Instant,
    state: Mutex<State>,
}

struct State {
    position: u64,
    total: Option<u64>,
    message: String,
    last_line: Instant,
    /// Tenths of the total passed when the last line was printed.
    last_tenth: u64,
}

impl Task {
    /// Shows the rate (units per second since the task started) too.
    pub fn with_rate(mut self) -> Task {
        self.rate = true;
        self
    }

    /// Adds `n` units done.
    pub fn inc(&self, n: u64) {
        self.update(|s| s.position += n);
    }

    /// Adds `n` units done and changes the message, together.
    pub fn advance(&self, n: u64, message: impl Into<String>) {
        let message = message.into();
        self.update(|s| {
            s.position += n;
            s.message = message;
        });
    }

    pub fn set_position(&self, position: u64) {
        self.update(|s| s.position = position);
    }

    /// Changes the total (it may grow or shrink while the task runs).
    pub fn set_total(&self, total: u64) {
        self.update(|s| s.total = Some(total));
    }

    /// The text after the counts (rates, phases).
    pub fn set_message(&self, message: impl Into<String>) {
        let message = message.into();
        self.update(|s| s.message = message);
    }

    /// Ends the task: the bar stays with `message`; plain, a last line.
    pub fn finish(&self, message: impl Into<String>) {
        let message = message.into();
        match &self.bar {
            Some(bar) => {
                let s = self.state.lock().expect("progress lock");
                bar.set_position(s.position);
                bar.finish_with_message(message);
            }
            None => self.stream.line(&format!("{}: {message}", self.label)),
        }
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        let mut s = self.state.lock().expect("progress lock");
        f(&mut s);
        let now = Instant::now();
        if let Some(bar) = &self.bar {
            if let Some(total) = s.total {
                if bar.length() != Some(total) {
                    bar.set_length(total);
                }
            }
            bar.set_position(s.position);
            // The rate is redrawn at most every half second.
            if self.rate && now.duration_since(s.last_line) >= Duration::from_millis(500) {
                s.last_line = now;
                bar.set_message(self.rate_message(s.position, &s.message, now));
            } else if !self.rate && bar.message() != s.message {
                bar.set_message(s.message.clone());
            }
            return;
        }
        let tenth = match s.total {
            Some(total) if total > 0 => s.position.min(total) * 10 / total,
            _ => 0,
        };
        if tenth > s.last_tenth || now.duration_since(s.last_line) >= LINE_INTERVAL {
            s.last_tenth = s.last_tenth.max(tenth);
            s.last_line = now;
            let message = self.rate_message(s.position, &s.message, now);
            self.stream.line(&plain_line(&self.label, self.unit, s.position, s.total, &message));
        }
    }

    /// The message, after the rate if the task shows one.
    fn rate_message(&self, position: u64, message: &str, now: Instant) -> String {
        if !self.rate {
            return message.to_string();
        }
        let secs = now.duration_since(self.started).as_secs_f64();
        let per_sec = if secs > 0.0 { (position as f64 / secs) as u64 } else { 0 };
        let rate = match self.unit {
            Unit::Bytes => format!("{}/s", HumanBytes(per_sec)),
            Unit::Count(noun) => format!("{} {noun}/s", HumanCount(per_sec)),
        };
        if message.is_empty() {
            rate
        } else {
            format!("{rate}, {message}")
        }
    }
}

/// "load 'users': 1.5 MiB/15.0 MiB (10%), 12,000 records, 50,000 records/s"
fn plain_line(label: &str, unit: Unit, position: u64, total: Option<u64>, message: &str) -> String {
    let noun = unit.noun();
    let noun = if noun.is_empty() { String::new() } else { format!(" {noun}") };
    let mut line = match total {
        Some(t) if t > 0 => {
            let pct = position.min(t) * 100 / t;
            format!("{label}: {}/{}{noun} ({pct}%)", unit.show(position), unit.show(t))
        }
        _ => format!("{label}: {}{noun}", unit.show(position)),
    };
    if !message.is_empty() {
        line.push_str(", ");
        line.push_str(message);
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_line_shows_counts_percent_and_message() {
        let l = plain_line("load 't'", Unit::Count("records"), 2500, Some(10_000), "3,000 records/s");
        assert_eq!(l, "load 't': 2,500/10,000 records (25%), 3,000 records/s");
        assert_eq!(plain_line("x", Unit::Bytes, 1024, None, ""), "x: 1.00 KiB");
        assert_eq!(plain_line("x", Unit::Count("tablets"), 0, Some(0), "waiting"), "x: 0 tablets, waiting");
    }

    #[test]
    fn plain_task_prints_once_per_tenth() {
        let p = Progress::plain(Stream::Stderr);
        let t = p.task("t", Some(100), Unit::Count("things"));
        for _ in 0..100 {
            t.inc(1);
        }
        let s = t.state.lock().unwrap();
        assert_eq!(s.last_tenth, 10);
        assert_eq!(s.position, 100);
    }
}
