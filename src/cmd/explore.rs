//! `cuorder explore`: a program's executions searched with a chosen strategy (`exhaustive`, `dpor`, `bounded`, or
//! sampled `random` and `pct` walks), its findings reported as `check` reports them with what showed each, and
//! saved as replayable artifacts with `--save`.

use std::path::PathBuf;
use std::process::ExitCode;

use cuorder::artifact::Artifact;
use cuorder::cli::{load_inputs, say, Format, Verdict};
use cuorder::json::{ExploreFinding, ExploreOut};
use cuorder::progress::Meter;
use cuorder::LoadError;
use cuorder_model::describe::count;
use cuorder_model::semantics::Semantics;
use cuorder_sim::explore::{Exploration, Limits};
use cuorder_sim::strategy::{SampleOptions, Strategy};

use super::Ctx;
use crate::{ExploreArgs, StrategyArg};

/// What a strategy's search gave: the exploration, the report's header line, a note per finding (sampling: the
/// executions that showed it; bounded: the bound at which it first appeared), the sampled executions that showed
/// each finding and the executions run (sampling only), and the same for `--format json` (docs/json.md).
struct Searched {
    ex: Exploration,
    header: String,
    notes: Vec<String>,
    hits: Option<(Vec<u64>, u64)>,
    info: ExploreOut,
}

/// Runs `cuorder explore`.
pub fn run(ctx: &Ctx, a: ExploreArgs) -> ExitCode {
    let (prof, prog) = match load_inputs(&a.profile, &a.program, ctx.color, a.torch) {
        Ok(x) => x,
        Err(e) => return a.format.fail("explore", e),
    };
    let sem = Semantics::new(&prog, &prof);
    let Searched { ex, header, notes, hits, mut info } = search(&sem, &a, ctx.progress);
    let mut rep = cuorder::report::build_report(&sem, &ex);
    if let Some((h, n)) = &hits {
        rep.sampled_executions = Some(*n);
        for (f, hits) in rep.findings.iter_mut().zip(h) {
            f.sampled = Some((*hits, *n));
        }
    }
    let strategy_name = header.trim_start_matches("strategy ").split(',').next().unwrap_or("").to_string();
    let saved = match &a.save {
        None => vec![],
        Some(dir) => {
            let bytes = std::fs::read(&a.program).unwrap_or_default();
            let artifacts: Vec<Artifact> = rep
                .findings
                .iter()
                .enumerate()
                .map(|(i, f)| Artifact {
                    strategy: strategy_name.clone(),
                    seed: info.findings.get(i).and_then(|f| f.first_seed),
                    torch: a.torch.options(),
                    ..Artifact::new(&a.program, &bytes, &prof, f, &ex.keys[i])
                })
                .collect();
            match cuorder::artifact::save_all(dir, &artifacts) {
                Ok(paths) => paths,
                // `e` names the file it could not write; with --format json it is the `errors` document.
                Err(e) => return a.format.fail("explore", LoadError::unplaced(dir.display().to_string(), e)),
            }
        }
    };
    // Each finding's witness hint names its saved artifact (or how to save it), in the text and the JSON alike.
    for (i, f) in rep.findings.iter_mut().enumerate() {
        f.text = replay_hint(&f.text, saved.get(i));
    }
    for (f, path) in info.findings.iter_mut().zip(&saved) {
        f.artifact = Some(path.display().to_string());
    }
    info.settings = a.torch.flags();
    // A clean sampled run proves nothing; a clean bounded one only when a pass cut no execution.
    let sampled = matches!(a.strategy, StrategyArg::Random | StrategyArg::Pct);
    let verdict = Verdict::of_search(!rep.findings.is_empty(), sampled || rep.limit_hit.is_some());
    match a.format {
        Format::Text => {
            let mut out = format!("{header}\n{}", a.torch.note());
            for note in &notes {
                out.push_str(&format!("{note}\n"));
            }
            if let Some(dir) = &a.save {
                let n = count(rep.findings.len() as u64, "finding");
                out.push_str(&format!("  saved {n} to {} (`cuorder replay FILE`)\n", dir.display()));
            }
            out.push_str(&rep.to_text());
            say(&out)
        }
        Format::Json => say(&cuorder::json::explore(&sem, &rep, &a.program.display().to_string(), verdict.exit_code(), info).to_json()),
    };
    verdict.into()
}

/// Runs the strategy of `a` on `sem` under its limits, with a progress display on stderr when `progress` (and
/// Ctrl-C stopping the search).
fn search(sem: &Semantics, a: &ExploreArgs, progress: bool) -> Searched {
    let max_time_ms = a.time_limit.map_or(cuorder_sim::explore::DEFAULT_MAX_TIME_MS, |s| (s * 1000.0) as u64);
    let (max_states, max_time_s) = (a.max_states as u64, max_time_ms / 1000);
    let meter = match a.strategy {
        StrategyArg::Exhaustive | StrategyArg::Dpor => Meter::States { max_states, max_time_s },
        StrategyArg::Bounded => Meter::Bounded { bound: a.bound, max_states, max_time_s },
        StrategyArg::Random | StrategyArg::Pct => Meter::Executions { executions: a.executions, time_limit_s: a.time_limit },
    };
    let w = cuorder::progress::watch(progress, meter);
    let limits = Limits {
        max_states: a.max_states,
        first: a.first,
        max_time_ms,
        max_memory_bytes: a.max_memory_mb.saturating_mul(1 << 20),
        resident: true,
        progress: Some(w.progress()),
        ..Limits::default()
    };
    let numbered = |n: usize| (1..=n as u32).map(|number| ExploreFinding { number, ..Default::default() }).collect::<Vec<_>>();
    let searched = match a.strategy {
        StrategyArg::Exhaustive => {
            let ex = cuorder_sim::explore::explore(sem, &limits);
            let info = ExploreOut { strategy: "exhaustive".into(), findings: numbered(ex.findings.len()), ..Default::default() };
            Searched { ex, header: "strategy exhaustive".to_string(), notes: vec![], hits: None, info }
        }
        StrategyArg::Dpor => {
            let d = cuorder_sim::dpor::explore_dpor(sem, &limits);
            let info = ExploreOut {
                strategy: "dpor".into(),
                executions: Some(d.executions as u64),
                sleep_blocked: Some(d.sleep_blocked as u64),
                findings: numbered(d.exploration.findings.len()),
                ..Default::default()
            };
            let header = format!(
                "strategy dpor, {} to a final state, {} cut short by sleep sets (an equivalent execution was explored)",
                count(d.executions as u64, "execution"),
                d.sleep_blocked
            );
            Searched { ex: d.exploration, header, notes: vec![], hits: None, info }
        }
        StrategyArg::Bounded => bounded(sem, &limits, a.bound),
        StrategyArg::Random | StrategyArg::Pct => {
            let strategy = if a.strategy == StrategyArg::Random { Strategy::Random } else { Strategy::Pct { depth: a.depth.max(1) } };
            let opt = SampleOptions {
                strategy,
                seed: a.seed,
                executions: a.executions,
                time_limit: a.time_limit.map(std::time::Duration::from_secs_f64),
                first: a.first,
                jobs: a.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())).max(1),
                max_steps: a.max_steps,
                progress: Some(w.progress()),
            };
            sampled(sem, &opt)
        }
    };
    w.finish();
    searched
}

/// `--strategy bounded`: the preemption-bounded search up to `bound`, each finding with the bound that first
/// showed it.
fn bounded(sem: &Semantics, limits: &Limits, bound: u32) -> Searched {
    let b = cuorder_sim::explore::explore_bounded(sem, limits, bound);
    let per: Vec<String> = b.pass_states.iter().enumerate().map(|(k, n)| format!("bound {k}: {n}")).collect();
    let mut header = format!(
        "strategy bounded (bound {bound}), at most {bound} preemption{}: {} ({})",
        if bound == 1 { "" } else { "s" },
        count(b.exploration.states as u64, "state"),
        per.join(", ")
    );
    if let (Some(k), None) = (b.saturated_at, &b.exploration.limit_hit) {
        header.push_str(&format!("\n  bound {k} cut no execution: every execution of the reduced search was explored, as by `check`"));
    }
    let notes = b
        .first_bound
        .iter()
        .enumerate()
        .map(|(i, k)| format!("  finding {} first at bound {k} (an execution with {k} preemption{} shows it)", i + 1, if *k == 1 { "" } else { "s" }))
        .collect();
    let info = ExploreOut {
        strategy: "bounded".into(),
        bound: Some(bound),
        states_per_bound: b.pass_states.iter().map(|n| *n as u64).collect(),
        saturated_at: b.saturated_at,
        findings: b
            .first_bound
            .iter()
            .enumerate()
            .map(|(i, k)| ExploreFinding { number: i as u32 + 1, first_bound: Some(*k), ..Default::default() })
            .collect(),
        ..Default::default()
    };
    Searched { ex: b.exploration, header, notes, hits: None, info }
}

/// `--strategy random|pct`: the sampled walks of `opt`, each finding with the executions that showed it and the
/// seed of the first.
fn sampled(sem: &Semantics, opt: &SampleOptions) -> Searched {
    let r = cuorder_sim::strategy::sample(sem, opt);
    let (seed, executions) = (opt.seed, count(r.executions, "execution"));
    let header = format!(
        "strategy {}, seeds {}..{}: {executions}, {}",
        opt.strategy.name(),
        seed,
        seed.wrapping_add(r.executions),
        count(r.steps, "step")
    );
    let notes = r
        .hits
        .iter()
        .zip(&r.seeds)
        .enumerate()
        .map(|(i, (h, s))| format!("  finding {} seen in {h} of {executions} (first with seed {s})", i + 1))
        .collect();
    let info = ExploreOut {
        strategy: match opt.strategy {
            Strategy::Random => "random",
            Strategy::Pct { .. } => "pct",
        }
        .into(),
        seed: Some(seed),
        executions: Some(r.executions),
        depth: match opt.strategy {
            Strategy::Random => None,
            Strategy::Pct { depth } => Some(depth),
        },
        findings: r
            .hits
            .iter()
            .zip(&r.seeds)
            .enumerate()
            .map(|(i, (h, s))| ExploreFinding { number: i as u32 + 1, seen_in: Some(*h), first_seed: Some(*s), ..Default::default() })
            .collect(),
        ..Default::default()
    };
    let hits = Some((r.hits.clone(), r.executions));
    Searched { ex: r.exploration, header, notes, hits, info }
}

/// The text of one of `explore`'s findings with its witness hint pointing at `replay` of its saved artifact `saved`
/// (`check`'s hint, `run --witness N`, re-runs `check`'s search, which numbers findings its own way and may not
/// finish where sampling did; issue 10 review), or saying how to save it.
fn replay_hint(text: &str, saved: Option<&PathBuf>) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        match (line.find("(`cuorder run PROGRAM --witness "), line.rfind("` prints it)")) {
            (Some(a), Some(b)) if b > a => {
                let hint = match saved {
                    Some(p) => format!("(`cuorder replay {}` prints it)", p.display()),
                    None => "(`--save DIR` keeps it; `cuorder replay DIR/finding-N-KIND.ron` prints it)".to_string(),
                };
                out.push_str(&line[..a]);
                out.push_str(&hint);
                out.push_str(&line[b + "` prints it)".len()..]);
            }
            _ => out.push_str(line),
        }
    }
    out
}
