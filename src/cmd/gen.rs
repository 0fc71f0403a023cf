//! `cuorder gen`: writes random well-formed programs (`gen --out DIR`, the agreement-test generator), programs
//! covering the single-GPU model (`gen cover`, the hardware batch generator), or a pipeline-parallel training
//! schedule as Megatron-LM runs it (`gen pipeline`, as a program or a Promela model).

use std::path::Path;
use std::process::ExitCode;

use cuorder::cli::{bad_input, emit, say, Verdict};
use cuorder::progress::{watch, Meter};
use cuorder_model::program::Program;

use super::Ctx;
use crate::{CoverArgs, EmitArg, GenArgs, GenWhat, PipelineArgs, ScheduleArg};

/// Runs `cuorder gen`.
pub fn run(ctx: &Ctx, a: GenArgs) -> ExitCode {
    match a.what {
        Some(GenWhat::Pipeline(p)) => pipeline(p),
        Some(GenWhat::Cover(c)) => cover(ctx, c),
        None => {
            let out = a.out.expect("clap requires --out without a subcommand");
            let opt = cuorder_sim::gen::GenOptions::default();
            gen_files(ctx, &out, a.seed, a.count, &|s| cuorder_sim::gen::program(s, &opt))
        }
    }
}

/// `cuorder gen pipeline`: the program (or Promela model) on stdout or in `--output`.
fn pipeline(a: PipelineArgs) -> ExitCode {
    use cuorder_sim::pipeline::{PipelineOptions, Schedule, Variant};
    let schedule = match a.schedule {
        ScheduleArg::Gpipe => Schedule::Gpipe,
        ScheduleArg::OneFOneB => Schedule::OneFOneB,
        ScheduleArg::Interleaved => Schedule::Interleaved,
    };
    let chunks = a.chunks.unwrap_or(if schedule == Schedule::Interleaved { 2 } else { 1 });
    let variant = if a.bug {
        Variant::Bug
    } else if a.race {
        Variant::Race
    } else {
        Variant::Correct
    };
    let opt = PipelineOptions { schedule, stages: a.stages, microbatches: a.microbatches, chunks, bytes: a.bytes, variant, unroll: a.unroll };
    if a.unroll && a.emit == EmitArg::Promela {
        return bad_input("--unroll applies to the program (--emit ron); the Promela model has one process per stage either way");
    }
    let text = match a.emit {
        EmitArg::Ron => cuorder_sim::pipeline::pipeline(&opt),
        EmitArg::Promela => cuorder_sim::pipeline::promela(&opt),
    };
    let text = match text {
        Ok(t) => t,
        Err(e) => return bad_input(&e.to_string()),
    };
    match a.output {
        None => {
            if let Err(e) = emit(&text) {
                return bad_input(&format!("cannot write the program: {e}"));
            }
        }
        Some(path) => {
            if let Err(e) = std::fs::write(&path, text) {
                return bad_input(&format!("cannot write {}: {e}", path.display()));
            }
        }
    }
    ExitCode::SUCCESS
}

/// `cuorder gen cover`: `--count` programs covering the single-GPU model into `--out`.
fn cover(ctx: &Ctx, a: CoverArgs) -> ExitCode {
    if !(1..=64).contains(&a.ranks) {
        return bad_input(&format!("--ranks must be 1 to 64, got {}", a.ranks));
    }
    let opt = cuorder_sim::cover::CoverOptions { ranks: a.ranks, ..Default::default() };
    gen_files(ctx, &a.out, a.seed, a.count, &|s| cuorder_sim::cover::program(s, &opt))
}

/// Writes programs `make(seed)` for `count` seeds from `seed` into `out` (created), each as `NAME.ron`. Ctrl-C stops
/// it between programs: it then says how many it wrote, and exits 3.
fn gen_files(ctx: &Ctx, out: &Path, seed: u64, count: u64, make: &dyn Fn(u64) -> Program) -> ExitCode {
    if let Err(e) = std::fs::create_dir_all(out) {
        return bad_input(&format!("cannot create {}: {e}", out.display()));
    }
    // Seeds seed, seed + 1, ..: refused if they run past the largest seed (they were cut short there, and the
    // count printed was not the count written).
    if count > 0 && seed.checked_add(count - 1).is_none() {
        return bad_input(&format!(
            "--seed {seed} with --count {count} runs past the largest seed ({}); at most {} program(s) fit from this seed",
            u64::MAX,
            u64::MAX - seed + 1
        ));
    }
    let w = watch(ctx.progress, Meter::Items { total: count, unit: "programs" });
    let progress = w.progress();
    let mut written = 0u64;
    for s in (0..count).map(|i| seed + i) {
        if progress.stop_requested() {
            break;
        }
        let p = make(s);
        let text = ron::ser::to_string_pretty(&p, ron::ser::PrettyConfig::default()).expect("program serializes");
        let path = out.join(format!("{}.ron", p.name));
        if let Err(e) = std::fs::write(&path, text + "\n") {
            w.finish();
            return bad_input(&format!("cannot write {}: {e}", path.display()));
        }
        written += 1;
        progress.add_item();
    }
    w.finish();
    if written < count {
        say(&format!("wrote {written} of {count} program(s) to {} ({})\n", out.display(), cuorder_sim::progress::INTERRUPTED));
        return Verdict::Inconclusive.into();
    }
    say(&format!("wrote {count} program(s) to {}\n", out.display()));
    ExitCode::SUCCESS
}
