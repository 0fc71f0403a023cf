//! `cuorder replay ARTIFACT`: replays a saved finding's schedule and prints its timeline and "reproduced", or that
//! the problem is gone, or where the replay diverged.

use std::process::ExitCode;

use cuorder::artifact::{Opened, Replayed};
use cuorder::cli::{fail, say, Verdict};
use cuorder_model::semantics::{OpLoc, Semantics, Step};

use super::Ctx;
use crate::ReplayArgs;

/// Runs `cuorder replay`.
pub fn run(ctx: &Ctx, args: ReplayArgs) -> ExitCode {
    let Opened { artifact: a, path, program: prog, text } = match cuorder::artifact::open(&args.artifact, args.program, ctx.color) {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let h = cuorder::artifact::program_hash(text.as_bytes());
    if h != a.program_hash {
        eprintln!("warning: {} changed since the finding was saved (hash {h}, saved {})", path.display(), a.program_hash);
    }
    let sem = Semantics::new(&prog, &a.profile);
    let kind = &a.kind;
    let (out, verdict) = match cuorder::artifact::replay_artifact(&sem, &a) {
        // The summary is the finding's first line, which may end by introducing the next ("on r0 g:").
        Replayed::Reproduced(t) => (
            format!("{}reproduced: {kind}: {}\n", cuorder::timeline::render(&sem, &t), a.summary.trim_end_matches(':')),
            Verdict::Done,
        ),
        Replayed::Vanished(t) => (
            format!("{}not reproduced: the schedule replays, but the {kind} is not there at its end\n", cuorder::timeline::render(&sem, &t)),
            Verdict::Problem,
        ),
        Replayed::Diverged(d) => (
            format!("diverged at step {}: {} is not enabled there (the program or the model changed)\n", d.at, step_words(&sem, &d.step)),
            Verdict::Problem,
        ),
    };
    say(&out);
    verdict.into()
}

/// A step of a schedule in the words of reports ("the next call of r0 main", "r0 main #10 kernel ..."), for
/// messages about a schedule that does not fit the program; a step naming an op the program lacks is shown as
/// recorded.
fn step_words(sem: &Semantics, step: &Step) -> String {
    let ops = |t: u32| sem.program.ranks.iter().flat_map(|r| r.threads.iter()).nth(t as usize).map_or(0, |th| th.ops.len());
    let op = |loc: OpLoc| {
        if (loc.op as usize) < ops(loc.thread) { sem.op_label(loc) } else { format!("{loc:?}") }
    };
    let threads = sem.program.ranks.iter().map(|r| r.threads.len()).sum::<usize>() as u32;
    match step {
        Step::Host { thread, .. } if *thread < threads => format!("the next call of {}", sem.thread_label(*thread)),
        Step::Item(k) if k.thread < threads => format!("the work of {}", op(k.loc())),
        Step::Transfer { send, recv } if send.thread < threads && recv.thread < threads => {
            format!("the transfer from {} to {}", op(*send), op(*recv))
        }
        Step::Eager { send } if send.thread < threads => format!("the eager delivery of {}", op(*send)),
        Step::Drain { recv } if recv.thread < threads => format!("the drain into {}", op(*recv)),
        other => format!("{other:?}"),
    }
}
