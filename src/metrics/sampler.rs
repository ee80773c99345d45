//! The one-minute memory behind the windowed signals: per-partition produce rates (for the
//! throughput skew and records-per-batch gauges) and per-group-partition lag samples (for the
//! lag trend d(lag)/dt).
//!
//! A task ([`run`]) samples every [`SAMPLE_INTERVAL`]; scrapes only read. The math ([`slope`],
//! [`skew`], the window deltas) is pure and tested here; the broker-facing part ([`sample`]) only
//! copies counters and lag into the window.
//!
//! # Invariants
//! - Each series keeps samples covering at most [`WINDOW_MS`] plus the one sample just before it,
//!   and series whose partition or committed offset disappeared are dropped at the next tick, so
//!   memory is bounded by live partitions x groups.
//! - Until a series has two samples, the windowed gauges fall back to since-start totals
//!   (records per batch, skew) or are absent (trend), never a made-up number.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use super::state::TrafficSnapshot;
use crate::broker::Broker;

/// How often the sampler runs.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(5);
/// The window the rates and the trend are computed over.
pub const WINDOW_MS: i64 = 60_000;

type PartitionKey = (String, i32);
type LagKey = (String, String, i32);

/// Sample windows, keyed by partition and by (group, partition).
#[derive(Default)]
pub struct Sampler {
    traffic: HashMap<PartitionKey, VecDeque<(i64, TrafficSnapshot)>>,
    lag: HashMap<LagKey, VecDeque<(i64, f64)>>,
}

fn push<T>(q: &mut VecDeque<(i64, T)>, now_ms: i64, v: T) {
    q.push_back((now_ms, v));
    while q.len() > 2 && q[1].0 <= now_ms - WINDOW_MS {
        q.pop_front();
    }
}

impl Sampler {
    pub fn record_traffic(&mut self, topic: &str, partition: i32, now_ms: i64, snap: TrafficSnapshot) {
        push(self.traffic.entry((topic.to_string(), partition)).or_default(), now_ms, snap);
    }

    pub fn record_lag(&mut self, group: &str, topic: &str, partition: i32, now_ms: i64, lag: f64) {
        push(self.lag.entry((group.to_string(), topic.to_string(), partition)).or_default(), now_ms, lag);
    }

    /// Keeps only the series named in `partitions` / `lags` (what exists now).
    pub fn retain(&mut self, partitions: &HashSet<PartitionKey>, lags: &HashSet<LagKey>) {
        self.traffic.retain(|k, _| partitions.contains(k));
        self.lag.retain(|k, _| lags.contains(k));
    }

    /// (first, last, seconds between) of a partition's traffic window; `None` until two samples.
    pub fn traffic_window(&self, topic: &str, partition: i32) -> Option<(TrafficSnapshot, TrafficSnapshot, f64)> {
        let q = self.traffic.get(&(topic.to_string(), partition))?;
        let (t0, first) = q.front()?;
        let (t1, last) = q.back()?;
        (t1 > t0).then(|| (*first, *last, (t1 - t0) as f64 / 1000.0))
    }

    /// d(lag)/dt in records per second over the window; `None` until two samples.
    pub fn lag_trend(&self, group: &str, topic: &str, partition: i32) -> Option<f64> {
        let q = self.lag.get(&(group.to_string(), topic.to_string(), partition))?;
        let points: Vec<(i64, f64)> = q.iter().copied().collect();
        slope(&points)
    }
}

/// Least-squares slope of `(time ms, value)` points, per second. `None` with fewer than two
/// distinct times.
pub fn slope(points: &[(i64, f64)]) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let t0 = points[0].0;
    let n = points.len() as f64;
    let xs: Vec<f64> = points.iter().map(|(t, _)| (t - t0) as f64 / 1000.0).collect();
    let mean_x = xs.iter().sum::<f64>() / n;
    let mean_y = points.iter().map(|(_, y)| y).sum::<f64>() / n;
    let mut num = 0.0;
    let mut den = 0.0;
    for (x, (_, y)) in xs.iter().zip(points) {
        num += (x - mean_x) * (y - mean_y);
        den += (x - mean_x) * (x - mean_x);
    }
    (den > 0.0).then(|| num / den)
}

/// Max over mean of per-partition rates; 1 when there is no traffic (nothing is skewed).
pub fn skew(rates: &[f64]) -> f64 {
    if rates.is_empty() {
        return 1.0;
    }
    let mean = rates.iter().sum::<f64>() / rates.len() as f64;
    let max = rates.iter().copied().fold(0.0, f64::max);
    if mean > 0.0 {
        max / mean
    } else {
        1.0
    }
}

/// Copies every partition's counters and every group's lag into the window.
pub fn sample(broker: &Broker, now_ms: i64) {
    let m = &broker.metrics;
    let mut partitions = HashSet::new();
    let topics = broker.all_topics();
    for t in &topics {
        for p in &t.partitions {
            partitions.insert((t.name.to_string(), p.index));
        }
    }
    m.retain_traffic(|topic, p| partitions.contains(&(topic.to_string(), p)));
    let lags = match m.groups_view() {
        Some(view) => super::lag::collect(broker, &view.committed_offsets(), now_ms),
        None => Vec::new(),
    };
    let mut sampler = m.sampler.lock();
    for t in &topics {
        for p in &t.partitions {
            sampler.record_traffic(&t.name, p.index, now_ms, m.traffic_of(&t.name, p.index));
        }
    }
    let mut lag_keys = HashSet::new();
    for l in &lags {
        sampler.record_lag(&l.group, &l.topic, l.partition, now_ms, l.lag_records as f64);
        lag_keys.insert((l.group.clone(), l.topic.clone(), l.partition));
    }
    sampler.retain(&partitions, &lag_keys);
}

/// Samples every [`SAMPLE_INTERVAL`] until aborted; also runs the exporter's upkeep (it drains
/// histogram buffers so they do not grow between scrapes).
pub async fn run(broker: Arc<Broker>, handle: Option<metrics_exporter_prometheus::PrometheusHandle>) {
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let b = broker.clone();
        let now = broker.now_ms();
        // Lag sampling reads batch headers from disk: keep it off the reactor threads.
        if let Err(e) = tokio::task::spawn_blocking(move || sample(&b, now)).await {
            tracing::error!(error = %e, "metrics sampler task failed");
        }
        if let Some(h) = &handle {
            h.run_upkeep();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line_is_its_rate_per_second() {
        let pts: Vec<(i64, f64)> = (0..13).map(|i| (1_000_000 + i * 5000, 100.0 + 2.5 * (i as f64) * 5.0)).collect();
        assert!((slope(&pts).unwrap() - 2.5).abs() < 1e-9);
        let flat: Vec<(i64, f64)> = (0..5).map(|i| (i * 5000, 7.0)).collect();
        assert_eq!(slope(&flat), Some(0.0));
        assert_eq!(slope(&[(0, 1.0)]), None);
        assert_eq!(slope(&[(5, 1.0), (5, 2.0)]), None);
    }

    #[test]
    fn skew_is_max_over_mean_and_one_without_traffic() {
        assert_eq!(skew(&[10.0, 10.0, 10.0]), 1.0);
        assert_eq!(skew(&[30.0, 0.0, 0.0]), 3.0);
        assert_eq!(skew(&[0.0, 0.0]), 1.0);
        assert_eq!(skew(&[]), 1.0);
    }

    #[test]
    fn window_keeps_one_minute_plus_the_sample_before_it() {
        let mut s = Sampler::default();
        for i in 0..30 {
            let snap = TrafficSnapshot { bytes_in: i * 100, ..Default::default() };
            s.record_traffic("t", 0, i as i64 * 5000, snap);
        }
        let (first, last, secs) = s.traffic_window("t", 0).unwrap();
        assert_eq!(secs, 60.0);
        assert_eq!(last.bytes_in - first.bytes_in, 1200);
        assert!(s.traffic.values().all(|q| q.len() <= 14));
    }

    #[test]
    fn lag_trend_follows_a_growing_backlog_and_vanishes_when_retained_away() {
        let mut s = Sampler::default();
        for i in 0..10 {
            s.record_lag("g", "t", 0, i * 5000, (i * 50) as f64);
        }
        assert!((s.lag_trend("g", "t", 0).unwrap() - 10.0).abs() < 1e-9);
        s.retain(&HashSet::new(), &HashSet::new());
        assert_eq!(s.lag_trend("g", "t", 0), None);
    }
}
