//! Writing metrics at scrape time: a process implements
//! [`prometheus_client::collector::Collector`] over the figures it already
//! keeps, and writes each family with one call of [`Scrape`]; [`render`]
//! encodes the whole in the OpenMetrics text format (what Prometheus asks
//! for; [`CONTENT_TYPE`]), and [`render_for`] in the Prometheus text
//! format 0.0.4 for scrapers that do not ask for OpenMetrics.
//!
//! Names are given whole (`shoal_log_bytes`, `shoal_cleaner_passes`), as
//! `docs/observability.md` lists them; a name ending in `_bytes` or
//! `_seconds` gets its OpenMetrics unit, and the encoder appends `_total`
//! to counters. So nothing on the request path depends on this module:
//! no registry of live metric objects, no lock, no lookup.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

/// The `Content-Type` of [`render`]'s text (OpenMetrics 1.0).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The `Content-Type` of the Prometheus text format 0.0.4 ([`to_text_format`]).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Encodes `collector` for a scraper that sent `accept` (its `Accept`
/// header): OpenMetrics if it asks for it (Prometheus does), else the
/// Prometheus text format 0.0.4 (curl, older scrapers). The content type
/// and the text.
pub fn render_for(
    accept: Option<&str>,
    collector: impl Collector,
) -> std::result::Result<(&'static str, String), std::fmt::Error> {
    let text = render(collector)?;
    Ok(match accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
        true => (CONTENT_TYPE, text),
        false => (TEXT_CONTENT_TYPE, to_text_format(&text)),
    })
}

/// The Prometheus text format 0.0.4 of an OpenMetrics text as [`render`]
/// writes it: the same samples, without `# UNIT` and `# EOF` lines, and a
/// counter family named after its samples (`x_total`), as that format
/// names it.
pub fn to_text_format(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // A family's HELP line waits for its TYPE line, which tells its name.
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if line.starts_with("# HELP ") {
            if let Some(h) = help.replace(line) {
                out.push_str(h);
                out.push('\n');
            }
            continue;
        }
        if let Some(name) = line.strip_prefix("# TYPE ").and_then(|t| t.strip_suffix(" counter")) {
            if let Some(h) = help.take() {
                let text = h.strip_prefix("# HELP ").and_then(|t| t.strip_prefix(name)).unwrap_or("");
                out.push_str(&format!("# HELP {name}_total{text}\n"));
            }
            out.push_str(&format!("# TYPE {name}_total counter\n"));
            continue;
        }
        if let Some(h) = help.take() {
            out.push_str(h);
            out.push('\n');
        }
        out.push_str(line);
        out.push('\n');
    }
    if let Some(h) = help {
        out.push_str(h);
        out.push('\n');
    }
    out
}

/// A set of labels: (name, value) pairs, values from fixed tables only (so
/// that the number of series stays bounded, whatever clients send).
pub type Labels<'a> = &'a [(&'static str, &'a str)];

pub type Result = std::result::Result<(), std::fmt::Error>;

/// Encodes `collector` as one scrape (ending in `# EOF`).
pub fn render(collector: impl Collector) -> std::result::Result<String, std::fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collector));
    let mut out = String::with_capacity(64 << 10);
    prometheus_client::encoding::text::encode(&mut out, &registry)?;
    Ok(out)
}

/// Histogram buckets as (upper bound, count in this bucket alone), the
/// last bound `f64::MAX` (+Inf).
pub type Buckets<'a> = &'a [(f64, u64)];

/// Writes metric families into one scrape.
pub struct Scrape<'a> {
    encoder: DescriptorEncoder<'a>,
}

impl<'a> Scrape<'a> {
    pub fn new(encoder: DescriptorEncoder<'a>) -> Scrape<'a> {
        Scrape { encoder }
    }

    /// A counter without labels; `name` without `_total`.
    pub fn counter(&mut self, name: &str, help: &str, value: impl EncodeCounterValue) -> Result {
        let (base, unit) = split_unit(name);
        let family = self.encoder.encode_descriptor(base, help, unit.as_ref(), MetricType::Counter)?;
        ConstCounter::new(value).encode(family)
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, name: &str, help: &str, value: impl EncodeGaugeValue) -> Result {
        let (base, unit) = split_unit(name);
        let family = self.encoder.encode_descriptor(base, help, unit.as_ref(), MetricType::Gauge)?;
        ConstGauge::new(value).encode(family)
    }

    /// A counter family: one value per label set.
    pub fn counters<'l, V: EncodeCounterValue>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (Labels<'l>, V)>,
    ) -> Result {
        let (base, unit) = split_unit(name);
        let mut family = self.encoder.encode_descriptor(base, help, unit.as_ref(), MetricType::Counter)?;
        for (labels, value) in series {
            ConstCounter::new(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// A gauge family: one value per label set.
    pub fn gauges<'l, V: EncodeGaugeValue>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (Labels<'l>, V)>,
    ) -> Result {
        let (base, unit) = split_unit(name);
        let mut family = self.encoder.encode_descriptor(base, help, unit.as_ref(), MetricType::Gauge)?;
        for (labels, value) in series {
            ConstGauge::new(value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// A histogram family: per label set, the sum of the observations and
    /// the count per bucket.
    pub fn histograms<'l, 'b>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (Labels<'l>, f64, Buckets<'b>)>,
    ) -> Result {
        let (base, unit) = split_unit(name);
        let mut family = self.encoder.encode_descriptor(base, help, unit.as_ref(), MetricType::Histogram)?;
        for (labels, sum, buckets) in series {
            let count = buckets.iter().map(|b| b.1).sum();
            family.encode_family(&labels)?.encode_histogram::<NoLabelSet>(sum, count, buckets, None)?;
        }
        Ok(())
    }
}

/// `name` without its unit suffix, and the unit.
fn split_unit(name: &str) -> (&str, Option<Unit>) {
    if let Some(base) = name.strip_suffix("_bytes") {
        (base, Some(Unit::Bytes))
    } else if let Some(base) = name.strip_suffix("_seconds") {
        (base, Some(Unit::Seconds))
    } else {
        (name, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Sample;

    impl Collector for Sample {
        fn encode(&self, encoder: DescriptorEncoder) -> Result {
            let mut s = Scrape::new(encoder);
            s.counter("shoal_things", "Things done.", 3u64)?;
            s.gauge("shoal_pool_bytes", "Bytes of the pool.", 4096u64)?;
            s.counters("shoal_requests", "Requests.", [(&[("frontend", "resp")][..], 7u64)])?;
            let buckets = [(0.5, 1), (1.0, 2), (f64::MAX, 1)];
            s.histograms("shoal_wait_seconds", "Waits.", [(&[("op", "get")][..], 2.5, &buckets[..])])
        }
    }

    #[test]
    fn render_writes_names_units_totals_and_cumulative_buckets() {
        let text = render(Sample).unwrap();
        for line in [
            "# TYPE shoal_things counter",
            "shoal_things_total 3",
            "shoal_pool_bytes 4096",
            "# UNIT shoal_pool_bytes bytes",
            "shoal_pool_bytes 4096",
            "shoal_requests_total{frontend=\"resp\"} 7",
            "shoal_wait_seconds_count{op=\"get\"} 4",
            "shoal_wait_seconds_bucket{le=\"1.0\",op=\"get\"} 3",
            "shoal_wait_seconds_bucket{le=\"+Inf\",op=\"get\"} 4",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in:\n{text}");
        }
    }

    #[test]
    fn to_text_format_names_counters_after_their_samples_and_drops_openmetrics_lines() {
        let text = to_text_format(&render(Sample).unwrap());
        for line in [
            "# HELP shoal_things_total Things done.",
            "# TYPE shoal_things_total counter",
            "shoal_things_total 3",
            "# HELP shoal_pool_bytes Bytes of the pool.",
            "# TYPE shoal_pool_bytes gauge",
            "# TYPE shoal_requests_total counter",
            "# TYPE shoal_wait_seconds histogram",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in:\n{text}");
        }
        assert!(!text.contains("# UNIT") && !text.contains("# EOF"), "{text}");
        let (kind, _) = render_for(Some("application/openmetrics-text;version=1.0.0"), Sample).unwrap();
        assert_eq!(kind, CONTENT_TYPE);
        assert_eq!(render_for(Some("*/*"), Sample).unwrap().0, TEXT_CONTENT_TYPE);
    }
}
