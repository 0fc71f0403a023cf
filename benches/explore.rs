//! `cargo bench --bench explore`: times exhaustive `check` (default profile, one thread) on straight-line and ring
//! programs of growing length, with and without forgetting (`Limits::forget`), and prints one row per program:
//! ops, states, milliseconds and the ratio to the previous row. Forgetting must make the cost of a straight-line
//! program linear in its length (issue 8, "state that forgets").

use std::time::Instant;

use cuorder::report::check;
use cuorder_model::profile::Profile;
use cuorder_sim::explore::Limits;

/// `ranks` ranks in a ring; each repeats `iters` times: a forward kernel, an event to the NCCL stream, one grouped
/// send to the next rank and recv from the previous one, events back, a backward kernel (Megatron's batched P2P
/// step with the events after the group, N10).
fn ring(ranks: usize, iters: usize) -> String {
    format!(
        r#"Program(ranks: {ranks}, streams: [Stream("s0", NonBlocking), Stream("sN", NonBlocking)],
    events: ["eReady", "eSend", "eRecv"], buffers: [Buffer("act", "16 MiB"), Buffer("grad", "16 MiB")],
    comms: [Comm("world")],
    threads: [Thread("main", [Repeat({iters}, [
        Kernel("forward", stream: "s0", writes: ["act"]),
        Record("eReady", stream: "s0"),
        Wait("eReady", stream: "sN"),
        Group([Send(to: Next, buf: "act", stream: "sN"), Recv(from: Prev, buf: "grad", stream: "sN")]),
        Record("eSend", stream: "sN"),
        Record("eRecv", stream: "sN"),
        Wait("eSend", stream: "s0"),
        Wait("eRecv", stream: "s0"),
        Kernel("backward", stream: "s0", reads: ["grad"], writes: ["act"]),
    ]), StreamSync("s0")])])"#
    )
}

/// One rank, one stream: `n` kernels writing one buffer (a straight line: one execution).
fn line(n: usize) -> String {
    format!(
        r#"Program(ranks: 1, streams: [Stream("s0", NonBlocking)], buffers: [Buffer("x", "1 MiB")],
    threads: [Thread("main", [Repeat({n}, [Kernel("k", stream: "s0", reads: ["x"], writes: ["x"])]), StreamSync("s0")])])"#
    )
}

fn row(name: &str, text: &str, forget: bool, prev: &mut Option<f64>) {
    let p = cuorder_model::format::load(name, text).expect("bench program loads");
    let ops: usize = p.ranks.iter().flat_map(|r| &r.threads).map(|t| t.ops.len()).sum();
    let limits = Limits { forget, max_states: 20_000_000, ..Limits::default() };
    let t0 = Instant::now();
    let r = check(&p, &Profile::portable(), &limits);
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let ratio = prev.map(|p| format!("{:.2}x", ms / p)).unwrap_or_default();
    *prev = Some(ms);
    println!(
        "{name:<14} forget={forget:<5} ops={ops:<7} states={:<9} findings={} limit={} {ms:>10.1} ms {ratio}",
        r.states,
        r.findings.len(),
        r.limit_hit.is_some()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; any other argument filters rows by name.
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let want = |n: &str| filter.is_empty() || filter.iter().any(|f| n.contains(f.as_str()));
    for forget in [true, false] {
        let mut prev = None;
        for n in [1_000, 2_000, 4_000, 8_000] {
            let name = format!("line-{n}");
            if want(&name) {
                row(&name, &line(n), forget, &mut prev);
            }
        }
        for ranks in [2, 3, 4] {
            let mut prev = None;
            for iters in [2, 4, 8, 16] {
                let name = format!("ring-{ranks}x{iters}");
                if want(&name) {
                    row(&name, &ring(ranks, iters), forget, &mut prev);
                }
            }
        }
    }
}
