//! Operations per second per table (`docs/migration.md`, "Load"): what a
//! server reports as `table_<id>_ops_per_sec` and `ops_per_sec` in STATS,
//! and what rebalancing evens beside memory.
//!
//! The store counts client operations per table with one relaxed atomic
//! add ([`Store::table_ops`]); nothing else is on the request path. A task
//! reads the counters every [`PERIOD`] and keeps, per table, a rate
//! smoothed over the last few periods (an exponential moving average with
//! weight [`WEIGHT`] on the newest period: a change of traffic shows
//! within about four periods, and one quiet second does not zero a rate).
//!
//! [`Store::table_ops`]: shoal_engine::Store::table_ops

use crate::context::ServerContext;
use parking_lot::Mutex;
use shoal_engine::TableId;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the counters are read.
pub const PERIOD: Duration = Duration::from_secs(1);
/// Weight of the newest period in a rate.
pub const WEIGHT: f64 = 0.5;

/// The rates, per table; the task updates them, STATS reads them.
#[derive(Default)]
pub struct LoadMeter {
    tables: Mutex<BTreeMap<TableId, Rate>>,
}

#[derive(Clone, Copy, Debug)]
struct Rate {
    /// The counter at the last reading.
    count: u64,
    at: Instant,
    per_sec: f64,
}

impl LoadMeter {
    /// Takes one reading of each table's counter at `now`: `counts` holds
    /// every table the store has; a table not in it is forgotten. A
    /// table's first reading gives it a rate of 0; a counter that went
    /// back (the table was dropped and made again) restarts its rate.
    pub fn observe(&self, counts: impl IntoIterator<Item = (TableId, u64)>, now: Instant) {
        let mut tables = self.tables.lock();
        let mut seen = BTreeMap::new();
        for (table, count) in counts {
            let rate = match tables.get(&table) {
                Some(r) if count >= r.count && now > r.at => {
                    let secs = now.duration_since(r.at).as_secs_f64();
                    let newest = (count - r.count) as f64 / secs;
                    Rate { count, at: now, per_sec: WEIGHT * newest + (1.0 - WEIGHT) * r.per_sec }
                }
                Some(r) if count >= r.count => *r,
                _ => Rate { count, at: now, per_sec: 0.0 },
            };
            seen.insert(table, rate);
        }
        *tables = seen;
    }

    /// Each table's operations per second (rounded), tables with none
    /// left out.
    pub fn rates(&self) -> Vec<(TableId, u64)> {
        self.tables.lock().iter().map(|(t, r)| (*t, r.per_sec.round() as u64)).filter(|(_, r)| *r > 0).collect()
    }
}

/// Reads the counters every [`PERIOD`] until the server shuts down.
pub async fn run(ctx: Arc<ServerContext>) {
    let mut stop = ctx.shutdown_signal();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let counts: Vec<(TableId, u64)> =
            ctx.tables.list().into_iter().filter_map(|(_, id)| Some((id, ctx.store.table_ops(id).ok()?))).collect();
        ctx.load.observe(counts, Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observe_smooths_the_rate_and_forgets_dropped_tables() {
        let m = LoadMeter::default();
        let t0 = Instant::now();
        let (a, b) = (TableId(1), TableId(2));
        m.observe([(a, 100), (b, 0)], t0);
        assert_eq!(m.rates(), vec![], "a first reading has no rate");
        m.observe([(a, 1100), (b, 0)], t0 + Duration::from_secs(1));
        assert_eq!(m.rates(), vec![(a, 500)], "half of the newest 1000/s");
        m.observe([(a, 2100), (b, 400)], t0 + Duration::from_secs(2));
        assert_eq!(m.rates(), vec![(a, 750), (b, 200)]);
        // A quiet table decays; a dropped one is forgotten.
        m.observe([(a, 2100)], t0 + Duration::from_secs(3));
        assert_eq!(m.rates(), vec![(a, 375)]);
        // A counter that went back (the table was made again) restarts.
        m.observe([(a, 5), (b, 50)], t0 + Duration::from_secs(4));
        assert_eq!(m.rates(), vec![]);
        // Two readings at one instant change nothing.
        m.observe([(a, 1005)], t0 + Duration::from_secs(5));
        m.observe([(a, 9999)], t0 + Duration::from_secs(5));
        assert_eq!(m.rates(), vec![(a, 500)]);
    }
}
