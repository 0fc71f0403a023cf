//! The cost model of timed runs (issue 9): how long each step of the model takes, as data beside the semantic
//! profile. Integer nanoseconds and bytes per second throughout; every built-in figure names its source.

use serde::{Deserialize, Serialize};

/// Latency and bandwidth of one transport, as the α-β (Hockney) model: moving `n` bytes costs
/// `latency_ns + n / bandwidth_bytes_per_s` seconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// α: time of an empty message, ns.
    pub latency_ns: u64,
    /// β⁻¹: sustained bandwidth, bytes per second (> 0).
    pub bandwidth_bytes_per_s: u64,
}

impl Link {
    /// Time to move `bytes` bytes over this link, ns (α + n/β).
    pub fn time_ns(&self, bytes: u64) -> u64 {
        self.latency_ns.saturating_add(transfer_ns(bytes, self.bandwidth_bytes_per_s))
    }
}

/// `bytes` at `bandwidth` bytes per second, in ns, rounded up (0 bytes: 0 ns).
pub fn transfer_ns(bytes: u64, bandwidth_bytes_per_s: u64) -> u64 {
    let bw = u128::from(bandwidth_bytes_per_s.max(1));
    ((u128::from(bytes) * 1_000_000_000).div_ceil(bw)).min(u128::from(u64::MAX)) as u64
}

/// How collectives are timed from their transport's α-β (the textbook cost of NCCL's algorithms: Thakur,
/// Rabenseifner & Gropp, "Optimization of collective communication operations in MPICH", 2005; NCCL's ring and
/// tree algorithms, NCCL docs "Environment variables: NCCL_ALGO").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CollectiveAlgorithm {
    /// Ring: all-reduce 2(p−1)α + 2(p−1)/p·n/β; all-gather and reduce-scatter (p−1)α + (p−1)/p·N/β (N = the
    /// gathered size); broadcast pipelined along the ring (p−1)α + n/β.
    Ring,
    /// Tree (double binary tree): all-reduce 2⌈log₂p⌉α + 2n/β; broadcast ⌈log₂p⌉α + n/β; all-gather and
    /// reduce-scatter as ring (NCCL has no tree for them).
    Tree,
    /// The cheaper of the two for each collective, as NCCL's tuner picks by size.
    Auto,
}

/// The cost model: what each host call, stream item and NCCL step costs. Loaded from RON
/// (`cuorder time --costs FILE`) or built in ([`CostModel::h200_nvlink`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostModel {
    pub name: String,
    /// Where the figures come from, in words.
    pub source: String,
    /// Ranks per node: ranks `r` and `q` share a node (and NVLink) when `r / gpus_per_node == q / gpus_per_node`.
    pub gpus_per_node: u32,
    /// Host time of a kernel launch, memset or async memcpy call, ns.
    pub launch_ns: u64,
    /// Time from a launch to the kernel starting on an idle stream, and between back-to-back kernels of one
    /// stream, ns (added to every finite item).
    pub item_overhead_ns: u64,
    /// Host time of `cudaEventRecord`, ns.
    pub event_record_ns: u64,
    /// Host time of `cudaStreamWaitEvent`, ns.
    pub event_wait_ns: u64,
    /// Host time of any other non-blocking call (queries, NCCL calls, group start/end, allocator calls), ns.
    pub host_call_ns: u64,
    /// Time from the awaited work ending to a blocked host call (synchronize, sync copy, `ncclCommInitRank`)
    /// returning, ns.
    pub wakeup_ns: u64,
    /// Time from an NCCL launch reaching the head of its stream to its kernel running, ns.
    pub nccl_launch_ns: u64,
    /// One-time connection set-up of one direction between two ranks (N7; a grouped send/recv pair sets up two
    /// directions in one set-up and pays twice), ns.
    pub connect_ns: u64,
    /// P2P and collective transport between GPUs of one node.
    pub nvlink: Link,
    /// P2P and collective transport between nodes.
    pub network: Link,
    /// The collective algorithm.
    pub collective_algorithm: CollectiveAlgorithm,
    /// A kernel runs at least as long as reading its read ranges at this rate and writing its write ranges at
    /// [`CostModel::kernel_write_bytes_per_s`] take, whatever its `duration:` says, bytes/s.
    pub kernel_read_bytes_per_s: u64,
    /// See [`CostModel::kernel_read_bytes_per_s`], bytes/s.
    pub kernel_write_bytes_per_s: u64,
    /// Copy bandwidth device→device on one GPU (memcpy; memset writes at this rate too), bytes/s.
    pub copy_device_bytes_per_s: u64,
    /// Copy bandwidth between pinned host memory and the device (either direction), bytes/s.
    pub copy_pinned_bytes_per_s: u64,
    /// Copy bandwidth between pageable host memory and the device (staged), bytes/s.
    pub copy_pageable_bytes_per_s: u64,
    /// Copy bandwidth host→host, bytes/s.
    pub copy_host_bytes_per_s: u64,
    /// Logical time: every step costs 1 ns whatever the figures above say, so a step's time is its position in the
    /// execution ([`CostModel::logical`]).
    #[serde(default)]
    pub logical: bool,
}

impl CostModel {
    /// An H200 NVLink node, from the calibration run on 2 × H200 (NV18), driver 580.159.04, NCCL 2.28.3,
    /// 2026-11-29 (`traces/hw/calibration/h200x2-nvlink-nccl2.28.3.measurements.ron`, `timing`), medians:
    /// host launch 4,425 ns (`host_launch_ns_median`); back-to-back kernel gap 5,280 ns
    /// (`device_queued_gap_ns_median`); event record 950 ns, stream wait 923 ns; idle `cudaStreamSynchronize`
    /// 2,277 ns (`idle_sync_host_ns_median`); P2P α 14,032 ns, β 373.9 GB/s (`p2p_latency_ns`,
    /// `p2p_bandwidth_bytes_per_s`, fitted over 4 KiB–1 GiB). Measured in the hardware runs of the seed example
    /// (`traces/hw/seed-2026-11-29/nccl-1456-grouped.ron`, 2 GiB grouped send/recv): connection set-up 100 ms per direction
    /// (the first grouped send+recv blocked `ncclGroupEnd` 186.6 ms for two directions; `nccl-1456-parity.ron`'s
    /// first send blocked 98.0 ms and the reverse direction 111.1 ms; N7), a kernel writing 2 GiB 0.5245 ms and one
    /// reading 2 GiB 1.679 ms (the executor's version-stamping kernels: 4.094 TB/s written, 1.279 TB/s read; a
    /// lower bound on every kernel's duration). Not measured, nominal: network α 5 µs and 50 GB/s (one
    /// 400 Gb/s InfiniBand NDR port per GPU, NVIDIA ConnectX-7 datasheet); device copy 4.8 TB/s HBM3e ÷ 2 (read + write; NVIDIA H200 datasheet); pinned 55 GB/s and pageable 20 GB/s
    /// (PCIe Gen5 x16 as commonly measured); host copy 10 GB/s; NCCL launch 6 µs (launch + the kernel's start,
    /// `device_queued_interval_ns_median` 7,072 ns minus the empty kernel's 1,760 ns, rounded).
    pub fn h200_nvlink() -> CostModel {
        CostModel {
            name: "h200-nvlink".into(),
            source: "traces/hw/calibration/h200x2-nvlink-nccl2.28.3.measurements.ron (timing medians) and \
                     traces/hw/seed-2026-11-29 (connection set-up, kernel bandwidth); nominal datasheet figures where \
                     not measured (sim/src/cost.rs)"
                .into(),
            gpus_per_node: 8,
            launch_ns: 4_425,
            item_overhead_ns: 5_280,
            event_record_ns: 950,
            event_wait_ns: 923,
            host_call_ns: 1_000,
            wakeup_ns: 2_277,
            nccl_launch_ns: 6_000,
            connect_ns: 100_000_000,
            nvlink: Link { latency_ns: 14_032, bandwidth_bytes_per_s: 373_946_090_522 },
            network: Link { latency_ns: 5_000, bandwidth_bytes_per_s: 50_000_000_000 },
            collective_algorithm: CollectiveAlgorithm::Auto,
            kernel_read_bytes_per_s: 1_279_000_000_000,
            kernel_write_bytes_per_s: 4_094_000_000_000,
            copy_device_bytes_per_s: 2_400_000_000_000,
            copy_pinned_bytes_per_s: 55_000_000_000,
            copy_pageable_bytes_per_s: 20_000_000_000,
            copy_host_bytes_per_s: 10_000_000_000,
            logical: false,
        }
    }

    /// Logical time: every step costs 1 ns (the timeline of an execution when no costs are given).
    pub fn logical() -> CostModel {
        CostModel {
            name: "logical".into(),
            source: "every step costs 1 time unit".into(),
            logical: true,
            ..CostModel::ideal()
        }
    }

    /// Only what the program says: kernel durations and `HostSleep`; every other cost 0 and links infinitely fast
    /// (α 0, 1 EB/s). With it, a timed run shows the schedule's shape (overlap, bubbles) without platform costs.
    pub fn ideal() -> CostModel {
        let fast = Link { latency_ns: 0, bandwidth_bytes_per_s: u64::MAX };
        CostModel {
            name: "ideal".into(),
            source: "kernel durations and sleeps from the program; everything else free".into(),
            gpus_per_node: u32::MAX,
            launch_ns: 0,
            item_overhead_ns: 0,
            event_record_ns: 0,
            event_wait_ns: 0,
            host_call_ns: 0,
            wakeup_ns: 0,
            nccl_launch_ns: 0,
            connect_ns: 0,
            nvlink: fast.clone(),
            network: fast,
            collective_algorithm: CollectiveAlgorithm::Ring,
            kernel_read_bytes_per_s: u64::MAX,
            kernel_write_bytes_per_s: u64::MAX,
            copy_device_bytes_per_s: u64::MAX,
            copy_pinned_bytes_per_s: u64::MAX,
            copy_pageable_bytes_per_s: u64::MAX,
            copy_host_bytes_per_s: u64::MAX,
            logical: false,
        }
    }

    /// The built-in cost models by name: `h200-nvlink`, `ideal`, `logical`.
    pub fn builtin(name: &str) -> Option<CostModel> {
        match name {
            "h200-nvlink" => Some(CostModel::h200_nvlink()),
            "ideal" => Some(CostModel::ideal()),
            "logical" => Some(CostModel::logical()),
            _ => None,
        }
    }

    /// The names [`CostModel::builtin`] knows.
    pub const BUILTIN: [&'static str; 3] = ["h200-nvlink", "ideal", "logical"];

    /// Parses a cost model from RON text.
    ///
    /// Errors: the RON error (with line and column) when the text is not a `CostModel`, or a message naming the
    /// field when a bandwidth is 0 or `gpus_per_node` is 0.
    pub fn from_ron(text: &str) -> Result<CostModel, String> {
        let m: CostModel = ron::from_str(text).map_err(|e| e.to_string())?;
        let mut bad = vec![];
        for (name, v) in [
            ("nvlink.bandwidth_bytes_per_s", m.nvlink.bandwidth_bytes_per_s),
            ("network.bandwidth_bytes_per_s", m.network.bandwidth_bytes_per_s),
            ("kernel_read_bytes_per_s", m.kernel_read_bytes_per_s),
            ("kernel_write_bytes_per_s", m.kernel_write_bytes_per_s),
            ("copy_device_bytes_per_s", m.copy_device_bytes_per_s),
            ("copy_pinned_bytes_per_s", m.copy_pinned_bytes_per_s),
            ("copy_pageable_bytes_per_s", m.copy_pageable_bytes_per_s),
            ("copy_host_bytes_per_s", m.copy_host_bytes_per_s),
            ("gpus_per_node", u64::from(m.gpus_per_node)),
        ] {
            if v == 0 {
                bad.push(format!("{name} must be greater than 0"));
            }
        }
        if bad.is_empty() {
            Ok(m)
        } else {
            Err(bad.join("; "))
        }
    }

    /// The link between the GPUs of ranks `a` and `b`.
    pub fn link(&self, a: u32, b: u32) -> &Link {
        let n = self.gpus_per_node.max(1);
        if a / n == b / n {
            &self.nvlink
        } else {
            &self.network
        }
    }

    /// Time of a collective of `kind` over `members` ranks (global ranks, sorted), `bytes` per member as NCCL counts
    /// them (the send size; all-gather: the per-rank part; reduce-scatter: the per-rank result), ns. The slowest
    /// link among the members is used for every hop.
    pub fn collective_ns(&self, kind: cuorder_model::program::CollectiveKind, members: &[u32], bytes: u64) -> u64 {
        use cuorder_model::program::CollectiveKind as K;
        let p = members.len().max(1) as u64;
        if p == 1 {
            return 0;
        }
        let l = match (members.first(), members.last()) {
            (Some(a), Some(b)) => self.link(*a, *b),
            _ => &self.nvlink,
        };
        let (a, bw) = (l.latency_ns, l.bandwidth_bytes_per_s);
        let log2p = u64::from(64 - (p - 1).leading_zeros());
        // Saturating throughout, as every time of a timed run: k latencies plus `bytes` (computed wide) at `bw`.
        let cost = |k: u64, bytes: u128| {
            let moved = transfer_ns(bytes.min(u128::from(u64::MAX)) as u64, bw);
            k.saturating_mul(a).saturating_add(moved)
        };
        let (p128, n) = (u128::from(p), u128::from(bytes));
        let ring = match kind {
            K::AllReduce => cost(2 * (p - 1), 2 * (p128 - 1) * n / p128),
            K::AllGather | K::ReduceScatter => cost(p - 1, (p128 - 1) * n),
            K::Broadcast { .. } | K::Reduce { .. } => cost(p - 1, n),
            // One-shot point-to-point (NCCL >= 2.28): every pair at once, one latency; all-to-all moves
            // (p - 1) / p of each rank's buffer, gather and scatter move (p - 1) per-rank parts through the root.
            K::AllToAll => cost(1, (p128 - 1) * n / p128),
            K::Gather { .. } | K::Scatter { .. } => cost(1, (p128 - 1) * n),
        };
        let tree = match kind {
            K::AllReduce => cost(2 * log2p, 2 * n),
            K::Broadcast { .. } | K::Reduce { .. } => cost(log2p, n),
            K::AllGather | K::ReduceScatter | K::AllToAll | K::Gather { .. } | K::Scatter { .. } => ring,
        };
        match self.collective_algorithm {
            CollectiveAlgorithm::Ring => ring,
            CollectiveAlgorithm::Tree => tree,
            CollectiveAlgorithm::Auto => ring.min(tree),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cuorder_model::program::CollectiveKind;

    #[test]
    fn alpha_beta_rounds_up_and_adds_latency() {
        let l = Link { latency_ns: 10, bandwidth_bytes_per_s: 3_000_000_000 };
        // 1 byte at 3 GB/s: 0.33 ns, rounded up to 1.
        assert_eq!(l.time_ns(1), 11);
        assert_eq!(l.time_ns(3_000), 1_010);
        assert_eq!(l.time_ns(0), 10);
    }

    #[test]
    fn ring_allreduce_matches_the_textbook_formula() {
        let mut m = CostModel::h200_nvlink();
        m.collective_algorithm = CollectiveAlgorithm::Ring;
        m.nvlink = Link { latency_ns: 1_000, bandwidth_bytes_per_s: 1_000_000_000 };
        // p = 4, n = 4000 B: 2·3·1000 ns + 2·3/4·4000 B at 1 B/ns = 6000 + 6000.
        assert_eq!(m.collective_ns(CollectiveKind::AllReduce, &[0, 1, 2, 3], 4_000), 12_000);
        // Tree: 2·2·1000 + 8000 = 12000 as well at this size; at 4 MB ring wins on bandwidth, tree loses.
        m.collective_algorithm = CollectiveAlgorithm::Tree;
        assert_eq!(m.collective_ns(CollectiveKind::AllReduce, &[0, 1, 2, 3], 4_000), 12_000);
        assert!(m.collective_ns(CollectiveKind::AllReduce, &[0, 1, 2, 3], 4_000_000) > 6_000_000 + 6_000);
    }

    #[test]
    fn ranks_on_two_nodes_use_the_network() {
        let m = CostModel::h200_nvlink();
        assert_eq!(m.link(0, 7), &m.nvlink);
        assert_eq!(m.link(7, 8), &m.network);
    }

    #[test]
    fn ron_round_trip_and_zero_bandwidth_is_an_error() {
        let m = CostModel::h200_nvlink();
        let text = ron::ser::to_string_pretty(&m, Default::default()).unwrap();
        assert_eq!(CostModel::from_ron(&text).unwrap(), m);
        let bad = text.replace("copy_host_bytes_per_s: 10000000000", "copy_host_bytes_per_s: 0");
        assert_eq!(CostModel::from_ron(&bad).unwrap_err(), "copy_host_bytes_per_s must be greater than 0");
    }
}
