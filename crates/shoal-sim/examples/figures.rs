//! Regenerates `docs/sim/`: runs the named sweeps (all by default) at the
//! default scenario and writes `<name>.svg`, `<name>.json` (one point per
//! line) and `<name>.txt` (the table) there. The same as
//! `shoal sim sweep NAME --plot docs/sim/NAME.svg`, without building the
//! whole `shoal` binary:
//!
//! `cargo run --release -p shoal-sim --example figures [-- NAME ...]`
//!
//! With `SIM_SCENARIO=file.toml` the sweeps start from that scenario and
//! their outputs are named `<scenario name>-<sweep>`.

use shoal_sim::{sweep, Scenario};
use std::io::Write;
use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let names: Vec<String> =
        if args.is_empty() { sweep::SWEEPS.iter().map(|(n, _)| n.to_string()).collect() } else { args };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/sim");
    std::fs::create_dir_all(&dir).expect("docs/sim");
    for name in names {
        let (mut base, prefix) = match std::env::var("SIM_SCENARIO") {
            Ok(path) => {
                let text = std::fs::read_to_string(&path).expect("scenario file");
                let s = Scenario::from_toml(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
                let prefix = format!("{}-", s.name);
                (s, prefix)
            }
            Err(_) => (Scenario::default(), String::new()),
        };
        if name != "baselines" && prefix.is_empty() {
            // One million measured requests per point (SIM_REQUESTS
            // overrides) keeps a sweep in minutes; each point's
            // convergence is still checked and shown.
            base.run.requests = std::env::var("SIM_REQUESTS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
        }
        let t = std::time::Instant::now();
        let result = sweep::run(&name, &base, |p| {
            eprintln!("{name}: {} at {} -> {:.3}", p.series, p.x, p.y);
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let table = result.table();
        print!("{table}");
        std::fs::write(dir.join(format!("{prefix}{name}.txt")), &table).expect("write table");
        let mut json = std::fs::File::create(dir.join(format!("{prefix}{name}.json"))).expect("json");
        for p in &result.points {
            writeln!(json, "{}", serde_json::to_string(p).expect("json")).expect("write json");
        }
        result.plot_svg(&dir.join(format!("{prefix}{name}.svg"))).expect("plot");
        eprintln!("{name}: {:.0} s", t.elapsed().as_secs_f64());
    }
}
