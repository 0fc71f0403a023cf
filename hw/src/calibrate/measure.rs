//! Timing figures from the observations of the timing probes (pure: tested with constructed observations).
//! Device times are differences of one GPU's `%globaltimer` (never across GPUs); host times are differences of the
//! run's host clock. Marker kernels (traced non-kernel ops) are included in the spans they delimit.

use super::probes::{EventRep, LaunchLayout, P2pLayout};
use crate::observation::{Observation, OpId};
use serde::{Deserialize, Serialize};

/// P2P time of one message size.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct P2pPoint {
    pub bytes: u64,
    /// One-way time of each ping-pong repetition: half the time from the end of an empty kernel before rank 0's
    /// send to the start of an empty kernel after its receive, on rank 0's GPU, in ns.
    pub one_way_ns: Vec<u64>,
    /// Median and minimum of `one_way_ns` (the first repetition of the first size includes the peer's late start;
    /// the median is the figure to use).
    pub one_way_ns_median: Option<u64>,
    pub one_way_ns_min: Option<u64>,
    /// `bytes / one_way_ns_median`, in bytes per second.
    pub bandwidth_bytes_per_s: Option<u64>,
    /// Time of each grouped exchange (both directions at once, `bytes` each way) on rank 0's GPU, measured like
    /// the ping-pong, in ns.
    pub exchange_ns: Vec<u64>,
    pub exchange_ns_median: Option<u64>,
}

/// Kernel launch figures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelTiming {
    pub launches: u32,
    /// Host time of one `cuLaunchKernel` call (median, 90th percentile), in ns.
    pub host_launch_ns_median: Option<u64>,
    pub host_launch_ns_p90: Option<u64>,
    /// Host time from one launch call to the next, including the executor's logging (median), in ns.
    pub host_launch_interval_ns_median: Option<u64>,
    /// Device duration of an empty kernel (median), in ns.
    pub device_kernel_ns_median: Option<u64>,
    /// Device start-to-start interval of empty kernels queued behind a long one (median): the device-side cost of
    /// one launch when the host is ahead, in ns.
    pub device_queued_interval_ns_median: Option<u64>,
    /// Device gap from one queued empty kernel's end to the next one's start (median), in ns.
    pub device_queued_gap_ns_median: Option<u64>,
    /// Device start-to-start interval of the free-running series (median): bounded by the host's launch rate.
    pub device_free_interval_ns_median: Option<u64>,
}

/// Event record / wait figures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventTiming {
    pub reps: u32,
    /// Host time of one `cuEventRecord` / `cuStreamWaitEvent` call (median), in ns.
    pub record_host_ns_median: Option<u64>,
    pub wait_host_ns_median: Option<u64>,
    /// Device gap from the end of a kernel on sA to the start of a kernel on sB that waits for it through an event
    /// (record on sA, wait on sB), in ns (median).
    pub cross_stream_gap_ns_median: Option<u64>,
    /// Device gap from the end of a kernel on sA to the next kernel on sA with an event record between (median).
    pub same_stream_record_gap_ns_median: Option<u64>,
    /// Device gap between two kernels on one stream with nothing between (median).
    pub same_stream_gap_ns_median: Option<u64>,
    /// Host time of `cuStreamSynchronize` on an idle stream (median), in ns.
    pub idle_sync_host_ns_median: Option<u64>,
}

/// Median (the lower middle element for even counts).
pub fn median(v: &[u64]) -> Option<u64> {
    percentile(v, 50)
}

/// The `p`-th percentile by nearest rank (lower).
pub fn percentile(v: &[u64], p: u32) -> Option<u64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let i = ((s.len() - 1) * p.min(100) as usize) / 100;
    Some(s[i])
}

fn op(rank: u32, index: u32) -> OpId {
    OpId { rank, thread: 0, index }
}

fn dev(o: &Observation, id: OpId) -> (Option<u64>, Option<u64>) {
    o.ops
        .iter()
        .find(|x| x.op == id)
        .and_then(|x| x.device)
        .map(|d| (d.start_ns, d.end_ns))
        .unwrap_or((None, None))
}

fn host(o: &Observation, id: OpId) -> (Option<u64>, Option<u64>) {
    o.ops.iter().find(|x| x.op == id).map(|x| (x.host_enter_ns, x.host_return_ns)).unwrap_or((None, None))
}

fn host_dur(o: &Observation, id: OpId) -> Option<u64> {
    match host(o, id) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        _ => None,
    }
}

/// `b - a` when both are known and ordered.
fn diff(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        _ => None,
    }
}

/// The P2P figures, one point per size in the order of the layout.
pub fn p2p(o: &Observation, layout: &P2pLayout) -> Vec<P2pPoint> {
    let mut sizes: Vec<u64> = Vec::new();
    for pp in &layout.pingpongs {
        if !sizes.contains(&pp.bytes) {
            sizes.push(pp.bytes);
        }
    }
    for ex in &layout.exchanges {
        if !sizes.contains(&ex.bytes) {
            sizes.push(ex.bytes);
        }
    }
    let timed = |t: &super::probes::Timed| diff(dev(o, op(0, t.before)).1, dev(o, op(0, t.after)).0);
    sizes
        .into_iter()
        .map(|bytes| {
            let one_way: Vec<u64> =
                layout.pingpongs.iter().filter(|t| t.bytes == bytes).filter_map(|t| timed(t).map(|rtt| rtt / 2)).collect();
            let exchange: Vec<u64> = layout.exchanges.iter().filter(|t| t.bytes == bytes).filter_map(timed).collect();
            let med = median(&one_way);
            P2pPoint {
                bytes,
                one_way_ns_median: med,
                one_way_ns_min: one_way.iter().copied().min(),
                bandwidth_bytes_per_s: med.filter(|&m| m > 0).map(|m| (bytes as u128 * 1_000_000_000 / m as u128) as u64),
                one_way_ns: one_way,
                exchange_ns_median: median(&exchange),
                exchange_ns: exchange,
            }
        })
        .collect()
}

/// Latency and bandwidth of the P2P line `t(n) = latency + n / bandwidth`: latency = the smallest size's median
/// one-way time, bandwidth = from the two largest sizes' medians (their difference, so that the latency cancels).
pub fn p2p_fit(points: &[P2pPoint]) -> (Option<u64>, Option<u64>) {
    let mut known: Vec<(u64, u64)> = points.iter().filter_map(|p| p.one_way_ns_median.map(|m| (p.bytes, m))).collect();
    known.sort_unstable();
    let latency = known.first().map(|k| k.1);
    let bw = match known.len() {
        0 => None,
        1 => Some(known[0]).filter(|k| k.1 > 0).map(|k| (k.0 as u128 * 1_000_000_000 / k.1 as u128) as u64),
        n => {
            let (a, b) = (known[n - 2], known[n - 1]);
            if b.1 > a.1 && b.0 > a.0 {
                Some(((b.0 - a.0) as u128 * 1_000_000_000 / (b.1 - a.1) as u128) as u64)
            } else if b.1 > 0 {
                Some((b.0 as u128 * 1_000_000_000 / b.1 as u128) as u64)
            } else {
                None
            }
        }
    };
    (latency, bw)
}

/// The kernel launch figures. The first 10 launches of each series are left out (warm-up).
pub fn launch(o: &Observation, l: &LaunchLayout) -> KernelTiming {
    const SKIP: u32 = 10;
    let free: Vec<u32> = (l.first + SKIP.min(l.count)..l.first + l.count).collect();
    let queued: Vec<u32> = (l.queued_first + SKIP.min(l.count)..l.queued_first + l.count).collect();
    let host_launch: Vec<u64> = free.iter().chain(&queued).filter_map(|&i| host_dur(o, op(0, i))).collect();
    let host_interval: Vec<u64> =
        free.windows(2).filter_map(|w| diff(host(o, op(0, w[0])).0, host(o, op(0, w[1])).0)).collect();
    let kernel: Vec<u64> = free.iter().chain(&queued).filter_map(|&i| {
        let (s, e) = dev(o, op(0, i));
        diff(s, e)
    }).collect();
    let starts = |v: &[u32]| -> Vec<u64> {
        v.windows(2).filter_map(|w| diff(dev(o, op(0, w[0])).0, dev(o, op(0, w[1])).0)).collect()
    };
    let gaps: Vec<u64> = queued.windows(2).filter_map(|w| diff(dev(o, op(0, w[0])).1, dev(o, op(0, w[1])).0)).collect();
    KernelTiming {
        launches: l.count,
        host_launch_ns_median: median(&host_launch),
        host_launch_ns_p90: percentile(&host_launch, 90),
        host_launch_interval_ns_median: median(&host_interval),
        device_kernel_ns_median: median(&kernel),
        device_queued_interval_ns_median: median(&starts(&queued)),
        device_queued_gap_ns_median: median(&gaps),
        device_free_interval_ns_median: median(&starts(&free)),
    }
}

/// The event figures. The first repetition is left out when there are more than two (warm-up).
pub fn events(o: &Observation, reps: &[EventRep]) -> EventTiming {
    let reps_used: &[EventRep] = if reps.len() > 2 { &reps[1..] } else { reps };
    let collect = |f: &dyn Fn(&EventRep) -> Option<u64>| -> Vec<u64> { reps_used.iter().filter_map(f).collect() };
    EventTiming {
        reps: reps.len() as u32,
        record_host_ns_median: median(&collect(&|r| host_dur(o, op(0, r.record)))),
        wait_host_ns_median: median(&collect(&|r| host_dur(o, op(0, r.wait)))),
        cross_stream_gap_ns_median: median(&collect(&|r| diff(dev(o, op(0, r.a)).1, dev(o, op(0, r.b)).0))),
        same_stream_record_gap_ns_median: median(&collect(&|r| diff(dev(o, op(0, r.a)).1, dev(o, op(0, r.c)).0))),
        same_stream_gap_ns_median: median(&collect(&|r| diff(dev(o, op(0, r.d)).1, dev(o, op(0, r.e2)).0))),
        idle_sync_host_ns_median: median(&collect(&|r| host_dur(o, op(0, r.idle_sync)))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::probes;
    use crate::observation::*;
    use cuorder_model::program::Program;

    /// An observation of `p` in which every op of rank r, index i, has host enter 1000 i, return 1000 i + 100 and a
    /// device span given by `span(rank, index)`.
    pub(crate) fn synthetic(p: &Program, span: &dyn Fn(u32, u32) -> Option<(u64, u64)>) -> Observation {
        let mut ops = Vec::new();
        for (r, rank) in p.ranks.iter().enumerate() {
            for (i, _) in rank.threads[0].ops.iter().enumerate() {
                let (r, i) = (r as u32, i as u32);
                ops.push(OpObservation {
                    op: OpId { rank: r, thread: 0, index: i },
                    kind: String::new(),
                    host_enter_ns: Some(1000 * i as u64),
                    host_return_ns: Some(1000 * i as u64 + 100),
                    device: span(r, i).map(|(s, e)| DeviceSpan { gpu: r, start_ns: Some(s), end_ns: Some(e) }),
                    finished: Some(true),
                    evidence: Evidence::DeviceTrace,
                    query_ready: None,
                    error: None,
                });
            }
        }
        Observation {
            format_version: FORMAT_VERSION,
            program: p.name.clone(),
            outcome: Outcome::Completed,
            environment: Environment::default(),
            timeout_ms: 0,
            versions: Default::default(),
            reads: vec![],
            ops,
            clock_anchors: vec![],
        }
    }

    #[test]
    fn p2p_figures_from_spans() {
        let sizes = [4096u64, 1 << 20];
        let (p, l) = probes::p2p_timing(&sizes, 3);
        // One-way time 10 us + bytes / 100 GB/s; the send starts at 1e6 * index, the recv ends a round trip later.
        let t = |b: u64| 10_000 + b * 10 / 1000;
        let mut spans = std::collections::BTreeMap::new();
        for pp in &l.pingpongs {
            let s0 = 1_000_000 * pp.before as u64;
            spans.insert(pp.before, (s0, s0 + 5));
            spans.insert(pp.after, (s0 + 5 + 2 * t(pp.bytes), s0 + 2 * t(pp.bytes) + 100));
        }
        for ex in &l.exchanges {
            let s0 = 1_000_000 * ex.before as u64;
            spans.insert(ex.before, (s0, s0 + 5));
            spans.insert(ex.after, (s0 + 5 + t(ex.bytes) + 7, s0 + t(ex.bytes) + 100));
        }
        let o = synthetic(&p, &|r, i| if r == 0 { spans.get(&i).copied() } else { None });
        let pts = p2p(&o, &l);
        assert_eq!(pts.len(), 2);
        assert_eq!(pts[0].one_way_ns, vec![t(4096); 3]);
        assert_eq!(pts[1].one_way_ns_median, Some(t(1 << 20)));
        assert_eq!(pts[1].exchange_ns_median, Some(t(1 << 20) + 7));
        let (lat, bw) = p2p_fit(&pts);
        assert_eq!(lat, Some(t(4096)));
        let bw = bw.unwrap();
        assert!((99_000_000_000..101_000_000_000).contains(&bw), "{bw}");
    }

    #[test]
    fn launch_and_event_figures() {
        let (p, l) = probes::launch_timing(50, 1_000_000);
        // Free series: kernels 3 us long every 8 us; queued: 2 us long every 2.5 us.
        let o = synthetic(&p, &|_, i| {
            let i = i as u64;
            if i < 50 {
                Some((8000 * i, 8000 * i + 3000))
            } else if i >= l.queued_first as u64 {
                let k = i - l.queued_first as u64;
                Some((1_000_000 + 2500 * k, 1_000_000 + 2500 * k + 2000))
            } else {
                None
            }
        });
        let k = launch(&o, &l);
        assert_eq!(k.host_launch_ns_median, Some(100));
        assert_eq!(k.host_launch_interval_ns_median, Some(1000));
        assert_eq!(k.device_free_interval_ns_median, Some(8000));
        assert_eq!(k.device_queued_interval_ns_median, Some(2500));
        assert_eq!(k.device_queued_gap_ns_median, Some(500));
        assert_eq!(k.device_kernel_ns_median, Some(2000)); // 40 of 3000, 40 of 2000: the lower middle

        let (p, reps) = probes::event_timing(5, 100_000);
        let mut spans = std::collections::BTreeMap::new();
        for (n, r) in reps.iter().enumerate() {
            let base = 10_000_000 * n as u64;
            spans.insert(r.a, (base, base + 100_000));
            spans.insert(r.b, (base + 104_000, base + 106_000));
            spans.insert(r.c, (base + 101_500, base + 103_000));
            spans.insert(r.d, (base + 200_000, base + 300_000));
            spans.insert(r.e2, (base + 301_000, base + 303_000));
        }
        let o = synthetic(&p, &|_, i| spans.get(&i).copied());
        let e = events(&o, &reps);
        assert_eq!(e.cross_stream_gap_ns_median, Some(4000));
        assert_eq!(e.same_stream_record_gap_ns_median, Some(1500));
        assert_eq!(e.same_stream_gap_ns_median, Some(1000));
        assert_eq!(e.record_host_ns_median, Some(100));
        assert_eq!(e.idle_sync_host_ns_median, Some(100));
    }

    #[test]
    fn percentiles() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[5]), Some(5));
        assert_eq!(median(&[4, 1, 3, 2]), Some(2));
        assert_eq!(percentile(&(1..=100).collect::<Vec<_>>(), 90), Some(90));
    }
}
