//! `shoal sim ...`: the discrete-event simulator (crate `shoal-sim`) from
//! the command line. Reads scenario files, runs, prints a table (or JSON
//! with --json) and writes plots. All modelling lives in `shoal-sim`.

use clap::{Args, Subcommand};
use shoal_sim::recovery::{self, RecoveryParams};
use shoal_sim::{sweep, Scenario};
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub enum SimCommand {
    /// Runs one scenario (default: the seed's defaults, Table 4.1).
    ///
    /// Prints throughput, per-component utilisation (mean/min/max),
    /// latency percentiles, read staleness, messages per request and
    /// whether the throughput converged (two halves of the run within 1%).
    Run(RunArgs),
    /// Runs a family of scenarios reproducing one of the seed's figures:
    /// protocols (4.3), baselines (4.5), bandwidth (4.7), write-rate (4.8),
    /// servers (4.9), or recovery.
    Sweep(SweepArgs),
    /// Predicts the recovery time of one crashed master.
    Recovery(RecoveryArgs),
    /// Prints the default scenario as TOML (a starting point for a file).
    Defaults,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// A TOML scenario file; fields it omits keep their defaults.
    pub scenario: Option<PathBuf>,
    /// One JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Overrides the scenario's seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Overrides the number of measured requests.
    #[arg(long)]
    pub requests: Option<u64>,
}

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// protocols, baselines, bandwidth, write-rate, servers or recovery.
    pub name: String,
    /// The base scenario (TOML); default: the seed's defaults.
    #[arg(long)]
    pub scenario: Option<PathBuf>,
    /// One JSON object per point instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Writes the plot as SVG to this path.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Overrides the number of measured requests per point.
    #[arg(long)]
    pub requests: Option<u64>,
}

#[derive(Args, Debug)]
pub struct RecoveryArgs {
    /// A TOML file of recovery parameters; default: RAMCloud's 35 GB
    /// experiment with Shoal's measured per-object cost.
    pub params: Option<PathBuf>,
    #[arg(long)]
    pub servers: Option<u32>,
    #[arg(long)]
    pub json: bool,
}

fn load(path: &Option<PathBuf>) -> Result<Scenario, String> {
    match path {
        None => Ok(Scenario::default()),
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
            Scenario::from_toml(&text).map_err(|e| format!("{}: {e}", p.display()))
        }
    }
}

/// Runs a `shoal sim` command; `Ok(false)` if a run did not converge.
pub fn run(cmd: &SimCommand) -> Result<bool, String> {
    match cmd {
        SimCommand::Defaults => {
            print!("{}", Scenario::default().to_toml());
            Ok(true)
        }
        SimCommand::Run(a) => {
            let mut s = load(&a.scenario)?;
            if let Some(seed) = a.seed {
                s.seed = seed;
            }
            if let Some(n) = a.requests {
                s.run.requests = n;
            }
            let r = shoal_sim::simulate(&s)?;
            if a.json {
                println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
            } else {
                print!("{}", r.table());
            }
            Ok(r.converged())
        }
        SimCommand::Sweep(a) => {
            let mut base = load(&a.scenario)?;
            if let Some(n) = a.requests {
                base.run.requests = n;
            }
            let json = a.json;
            let result = sweep::run(&a.name, &base, |p| {
                if !json {
                    eprintln!("  done: {} at {}", p.series, p.x);
                }
            })?;
            if json {
                for p in &result.points {
                    println!("{}", serde_json::to_string(p).map_err(|e| e.to_string())?);
                }
            } else {
                print!("{}", result.table());
            }
            if let Some(path) = &a.plot {
                result.plot_svg(path)?;
            }
            Ok(result.points.iter().all(|p| p.report.as_ref().is_none_or(|r| r.converged())))
        }
        SimCommand::Recovery(a) => {
            let mut p = match &a.params {
                None => RecoveryParams::default(),
                Some(path) => {
                    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
                    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
                }
            };
            if let Some(n) = a.servers {
                p.servers = n;
            }
            let r = recovery::predict(&p);
            if a.json {
                println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
            } else {
                println!(
                    "recovery of {} GB on {} servers: {:.2} s ({:.1} GB/s after detection), bottleneck {}\n  detection {:.3} s, coordination {:.3} s, disk {:.3} s, network {:.3} s, cores {:.3} s",
                    p.data_gbytes, r.servers, r.total_s, r.gbyte_s, r.bottleneck,
                    r.detection_s, r.coordination_s, r.disk_read_s, r.nic_s, r.cores_s
                );
            }
            Ok(true)
        }
    }
}
