//! Scratch: exploration cost and verdicts of cover programs.
use cuorder_model::profile::Profile;
use cuorder_model::semantics::Semantics;
use cuorder_sim::cover::{program, CoverOptions};
use cuorder_sim::explore::{explore, Limits};
use std::collections::BTreeMap;
fn main() {
    let a: Vec<u64> = std::env::args().skip(1).map(|x| x.parse().unwrap()).collect();
    let (seed, n) = (a[0], a[1]);
    let prof = Profile::portable();
    let o = CoverOptions::default();
    let mut hist: BTreeMap<String, usize> = BTreeMap::new();
    let mut worst = (0u128, 0u64, 0usize);
    let t0 = std::time::Instant::now();
    for s in seed..seed + n {
        let p = program(s, &o);
        let sem = Semantics::new(&p, &prof);
        let t = std::time::Instant::now();
        let ex = explore(&sem, &Limits::default());
        let el = t.elapsed().as_millis();
        if el > worst.0 { worst = (el, s, ex.states); }
        if el > 150 { let ops: Vec<usize> = p.ranks[0].threads.iter().map(|t| t.ops.len()).collect(); let q = p.ranks[0].threads.iter().flat_map(|t| t.ops.iter()).filter(|o| o.kind.name().contains("Query")).count(); eprintln!("slow seed {s}: {el} ms {} states ops {ops:?} queries {q}", ex.states); }
        let mut kinds: Vec<&str> = ex.findings.iter().map(|f| f.problem.kind_name()).collect();
        kinds.sort(); kinds.dedup();
        let key = if kinds.is_empty() { "clean".to_string() } else { kinds.join("+") };
        *hist.entry(key).or_default() += 1;
        if ex.limit_hit.is_some() { *hist.entry("LIMIT".into()).or_default() += 1; }
    }
    println!("{n} programs in {:?}; worst {worst:?}; {hist:?}", t0.elapsed());
}
#[allow(dead_code)]
fn unused() {}
