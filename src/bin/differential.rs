//! `cuorder-differential`: the long differential campaign of issue 30 (`sim::differential`): seeded programs over
//! every operation family, each checked by `check`'s search, the naive reference explorer, DPOR and random walks,
//! which must agree. Prints the counts per family and every disagreement; exits 1 if any (or any program the
//! generator made does not load, or if nothing could be compared), 0 otherwise, 2 on bad arguments.

use std::io::IsTerminal;

use clap::Parser;
use cuorder_sim::differential::{campaign, program_text, Budgets, GEN_VERSION};

/// Compare cuorder's explorers on generated programs (issue 30).
#[derive(Parser)]
#[command(name = "cuorder-differential", version)]
struct Args {
    /// Seeds to run, `A..B` (B excluded) or a count N for `0..N`.
    #[arg(long, default_value = "0..1200")]
    seeds: String,
    /// Worker threads, at least 1 (default: the machine's parallelism). The output does not depend on it.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    jobs: Option<u32>,
    /// Distinct states the reference explorer may visit per (program, profile) before the pair is skipped (at
    /// least 1).
    #[arg(long, default_value_t = Budgets::default().reference_states as u64, value_parser = clap::value_parser!(u64).range(1..))]
    reference_states: u64,
    /// Random walks per (program, profile), and as many PCT walks.
    #[arg(long, default_value_t = Budgets::default().walks)]
    walks: u64,
    /// Print the program of this seed (RON) and exit.
    #[arg(long, conflicts_with_all = ["seeds", "jobs", "reference_states", "walks"])]
    show: Option<u64>,
}

fn main() {
    let args = Args::parse();
    if let Some(seed) = args.show {
        print!("// cuorder-differential --show {seed} (generator version {GEN_VERSION})\n{}", program_text(seed));
        return;
    }
    let seeds = match args.seeds.split_once("..") {
        Some((a, b)) => a.trim().parse::<u64>().ok().zip(b.trim().parse::<u64>().ok()).map(|(a, b)| a..b),
        None => args.seeds.trim().parse::<u64>().ok().map(|n| 0..n),
    };
    let Some(seeds) = seeds.filter(|r| r.start < r.end) else {
        eprintln!("error: --seeds takes `A..B` with A < B, or a count N, not `{}`", args.seeds);
        std::process::exit(2);
    };
    let jobs = args.jobs.map_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()), |j| j as usize);
    let budgets = Budgets { reference_states: usize::try_from(args.reference_states).unwrap_or(usize::MAX), walks: args.walks, ..Budgets::default() };
    let n = seeds.end - seeds.start;
    let bar = indicatif::ProgressBar::new(n);
    if !std::io::stderr().is_terminal() {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let started = std::time::Instant::now();
    let result = campaign(seeds.clone(), jobs, &budgets, &|done| bar.set_position(done));
    bar.finish_and_clear();
    println!(
        "differential campaign: seeds {}..{} (generator version {GEN_VERSION}), profiles portable and eager, reference budget {} states, {} walks",
        seeds.start, seeds.end, budgets.reference_states, budgets.walks
    );
    print!("{}", result.render());
    eprintln!("{} programs in {:.1} s with {jobs} jobs", n, started.elapsed().as_secs_f64());
    let total = result.total();
    if total.compared == 0 {
        eprintln!("error: no (program, profile) pair was compared: every one was beyond the reference's budget (--reference-states)");
        std::process::exit(1);
    }
    std::process::exit(if total.disagreements > 0 || total.rejected > 0 { 1 } else { 0 });
}
