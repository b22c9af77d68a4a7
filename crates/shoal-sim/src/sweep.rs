//! The seed's figures as named sweeps: each runs a family of scenarios
//! derived from a base scenario, normalises their throughputs the way the
//! seed's figure does, and can draw itself as an SVG line plot.
//!
//! Figure numbers follow the seed's text: Fig. 4.7 is network bandwidth
//! and Fig. 4.8 the write ratio (the issue lists them the other way).

use crate::recovery::{self, RecoveryParams};
use crate::report::Report;
use crate::scenario::{Consistency, Protocol, Scenario, Substrate};
use plotters::prelude::*;
use serde::Serialize;

/// Sweep names accepted by [`run`], with what each reproduces.
pub const SWEEPS: &[(&str, &str)] = &[
    ("protocols", "Fig. 4.3: protocol x consistency x substrate, symmetric caching"),
    ("baselines", "Fig. 4.5: EREW and CREW baselines against symmetric caching (EC, SC)"),
    ("bandwidth", "Fig. 4.7: NIC bandwidth 10-560 Gbit/s"),
    ("write-rate", "Fig. 4.8: write ratio 0-15%"),
    ("servers", "Fig. 4.9: 20-100 servers"),
    ("recovery", "recovery time of a crashed master, 10-1,000 servers"),
];

#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub series: String,
    pub x: f64,
    /// The y value plotted: normalised throughput, or seconds for recovery.
    pub y: f64,
    pub report: Option<Report>,
    pub recovery: Option<recovery::RecoveryPrediction>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SweepResult {
    pub name: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// x values that are categories (protocols) get these names.
    pub x_names: Vec<String>,
    pub log_x: bool,
    pub points: Vec<Point>,
}

/// The four systems of Figs. 4.5 and 4.7-4.9.
fn systems(base: &Scenario) -> Vec<(String, Scenario)> {
    let mut out = Vec::new();
    for (name, sub, caching, cons) in [
        ("EREW baseline", Substrate::Erew, false, Consistency::Ec),
        ("CREW baseline", Substrate::Crew, false, Consistency::Ec),
        ("Symmetric caching EC", Substrate::Erew, true, Consistency::Ec),
        ("Symmetric caching SC", Substrate::Erew, true, Consistency::Sc),
    ] {
        let mut s = base.clone();
        s.system.substrate = sub;
        s.system.caching = caching;
        s.system.consistency = cons;
        s.system.protocol = Protocol::AllPeers;
        out.push((name.to_string(), s));
    }
    out
}

/// Runs sweep `name` over `base`, calling `progress` after each point.
pub fn run(name: &str, base: &Scenario, mut progress: impl FnMut(&Point)) -> Result<SweepResult, String> {
    let mut points = Vec::new();
    let mut sim = |series: &str, x: f64, s: &Scenario| -> Result<f64, String> {
        let mut s = s.clone();
        s.name = format!("{name}/{series}/{x}");
        let r = crate::simulate(&s)?;
        let y = r.throughput_mops;
        let p = Point { series: series.into(), x, y, report: Some(r), recovery: None };
        progress(&p);
        points.push(p);
        Ok(y)
    };
    let (title, x_label, y_label, x_names, log_x) = match name {
        "baselines" => {
            for (i, (series, s)) in systems(base).iter().enumerate() {
                sim(series, i as f64, s)?;
            }
            let names = systems(base).into_iter().map(|(n, _)| n).collect();
            ("Fig. 4.5: baselines vs symmetric caching", "system", "x EREW baseline", names, false)
        }
        "protocols" => {
            let protocols = [Protocol::PrimaryBroadcast, Protocol::PrimaryTimestamp, Protocol::AllPeers];
            for (sub, sub_name) in [(Substrate::Erew, "EREW"), (Substrate::Crew, "CREW")] {
                for (cons, c_name) in [(Consistency::Ec, "EC"), (Consistency::Sc, "SC")] {
                    for (i, p) in protocols.iter().enumerate() {
                        let mut s = base.clone();
                        s.system.caching = true;
                        s.system.substrate = sub;
                        s.system.consistency = cons;
                        s.system.protocol = *p;
                        sim(&format!("{sub_name} {c_name}"), i as f64, &s)?;
                    }
                }
            }
            let names = ["Primary Broadcast", "Primary Timestamp", "All Peers"];
            (
                "Fig. 4.3: protocols on EREW/CREW substrates",
                "protocol",
                "x CREW SC Primary Broadcast",
                names.iter().map(|n| n.to_string()).collect(),
                false,
            )
        }
        "bandwidth" => {
            for (series, s) in systems(base) {
                for g in [10.0, 40.0, 56.0, 100.0, 200.0, 400.0, 560.0] {
                    let mut s = s.clone();
                    s.infrastructure.nic_gbit_s = g;
                    sim(&series, g, &s)?;
                }
            }
            ("Fig. 4.7: NIC bandwidth", "Gbit/s per NIC", "x EREW baseline at 10 Gbit/s", vec![], true)
        }
        "write-rate" => {
            for (series, s) in systems(base) {
                for w in [0.0, 1.0, 2.0, 5.0, 10.0, 15.0] {
                    let mut s = s.clone();
                    s.workload.write_ratio = w / 100.0;
                    sim(&series, w, &s)?;
                }
            }
            ("Fig. 4.8: write ratio", "writes, %", "x EREW baseline at 0% writes", vec![], false)
        }
        "servers" => {
            for (series, s) in systems(base) {
                for n in [20u32, 40, 60, 100] {
                    let mut s = s.clone();
                    s.infrastructure.servers = n;
                    s.system.group_size = 0;
                    sim(&series, n as f64, &s)?;
                }
            }
            ("Fig. 4.9: servers", "servers", "x EREW baseline at 20 servers", vec![], false)
        }
        "recovery" => {
            for n in [10u32, 20, 40, 60, 100, 200, 400, 600, 1000] {
                let p = RecoveryParams { servers: n, ..RecoveryParams::default() };
                let r = recovery::predict(&p);
                let pt = Point {
                    series: "35 GB, 100-byte values".into(),
                    x: n as f64,
                    y: r.total_s,
                    report: None,
                    recovery: Some(r),
                };
                progress(&pt);
                points.push(pt);
            }
            ("Recovery time of one crashed master", "servers", "seconds", vec![], true)
        }
        _ => return Err(format!("unknown sweep {name:?}; known: {}", names())),
    };
    let mut result = SweepResult {
        name: name.into(),
        title: title.into(),
        x_label: x_label.into(),
        y_label: y_label.into(),
        x_names,
        log_x,
        points,
    };
    normalise(&mut result);
    Ok(result)
}

pub fn names() -> String {
    SWEEPS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

/// Divides throughputs by the seed's reference point of each figure.
fn normalise(r: &mut SweepResult) {
    let reference = |series: &str, x: f64| r.points.iter().find(|p| p.series == series && p.x == x).map(|p| p.y);
    let base = match r.name.as_str() {
        "baselines" => reference("EREW baseline", 0.0),
        "protocols" => reference("CREW SC", 0.0),
        "bandwidth" => reference("EREW baseline", 10.0),
        "write-rate" => reference("EREW baseline", 0.0),
        "servers" => reference("EREW baseline", 20.0),
        _ => None,
    };
    if let Some(b) = base {
        for p in &mut r.points {
            p.y /= b;
        }
    }
}

impl SweepResult {
    /// The aligned table: one row per point.
    pub fn table(&self) -> String {
        let mut o = format!("{}\n", self.title);
        let x = self.x_label.split(',').next().unwrap_or("x");
        if self.name == "recovery" {
            o += &format!("  {:<24} {:>8} {:>10}  what limits\n", "series", x, "seconds");
        } else {
            o += &format!("  {:<24} {:>8} {:>10} {:>10} {:>8}\n", "series", x, "relative", "Mops/s", "halves");
        }
        for p in &self.points {
            let x = self.x_name(p.x);
            match (&p.report, &p.recovery) {
                (Some(r), _) => {
                    o += &format!(
                        "  {:<24} {:>8} {:>10.2} {:>10.4} {:>7.2}%\n",
                        p.series,
                        x,
                        p.y,
                        r.throughput_mops,
                        r.halves_differ * 100.0
                    )
                }
                (None, Some(r)) => {
                    o += &format!(
                        "  {:<24} {:>8} {:>9.2}s  bottleneck {} (disk {:.2}s, network {:.2}s, cores {:.2}s, coordination {:.3}s)\n",
                        p.series, x, p.y, r.bottleneck, r.disk_read_s, r.nic_s, r.cores_s, r.coordination_s
                    )
                }
                _ => {}
            }
        }
        o
    }

    fn x_name(&self, x: f64) -> String {
        match self.x_names.get(x as usize) {
            Some(n) if !self.x_names.is_empty() => n.chars().take(8).collect(),
            _ => format!("{x}"),
        }
    }

    /// Draws the sweep as an SVG line plot, one line per series.
    pub fn plot_svg(&self, path: &std::path::Path) -> Result<(), String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let xs: Vec<f64> = self.points.iter().map(|p| p.x).collect();
        let ys: Vec<f64> = self.points.iter().map(|p| p.y).collect();
        let (x0, x1) =
            (xs.iter().cloned().fold(f64::INFINITY, f64::min), xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max));
        let y1 = ys.iter().cloned().fold(0.0, f64::max) * 1.1;
        let mut series: Vec<&str> = Vec::new();
        for p in &self.points {
            if !series.contains(&p.series.as_str()) {
                series.push(&p.series);
            }
        }
        let colours = [&BLUE, &RED, &GREEN, &MAGENTA, &CYAN, &BLACK];
        let names = self.x_names.clone();
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                chart
                    .configure_mesh()
                    .x_desc(self.x_label.as_str())
                    .y_desc(self.y_label.as_str())
                    .x_label_formatter(&|x: &f64| match names.get(x.round() as usize) {
                        Some(n) if (x - x.round()).abs() < 1e-9 => n.clone(),
                        _ if !names.is_empty() => String::new(),
                        _ => format!("{x}"),
                    })
                    .draw()
                    .map_err(|x| e(&x))?;
                for (i, s) in series.iter().enumerate() {
                    let c = colours[i % colours.len()];
                    let pts: Vec<(f64, f64)> =
                        self.points.iter().filter(|p| p.series == *s).map(|p| (p.x, p.y)).collect();
                    chart
                        .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
                        .map_err(|x| e(&x))?
                        .label(*s)
                        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
                    chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled()))).map_err(|x| e(&x))?;
                }
                chart
                    .configure_series_labels()
                    .background_style(WHITE.mix(0.8))
                    .border_style(BLACK)
                    .position(SeriesLabelPosition::UpperLeft)
                    .draw()
                    .map_err(|x| e(&x))?;
            }};
        }
        let mut builder = ChartBuilder::on(&root);
        builder.caption(self.title.as_str(), ("sans-serif", 22)).margin(15).x_label_area_size(45).y_label_area_size(60);
        if self.log_x {
            draw!(builder.build_cartesian_2d((x0 * 0.9..x1 * 1.1).log_scale(), 0.0..y1).map_err(|x| e(&x))?);
        } else {
            let pad = if names.is_empty() { 0.0 } else { 0.5 };
            draw!(builder.build_cartesian_2d(x0 - pad..x1 + pad, 0.0..y1).map_err(|x| e(&x))?);
        }
        root.present().map_err(|x| e(&x))?;
        Ok(())
    }
}
