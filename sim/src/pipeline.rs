//! Pipeline-parallel training schedules (GPipe, 1F1B, interleaved 1F1B) written as Megatron-LM runs them, as
//! surface-format programs (`cuorder gen pipeline`) and as stage-granularity Promela models (the Spin comparison,
//! `bench/spin/`).
//!
//! One rank per pipeline stage. Each rank has a compute stream and an NCCL stream. Every call of Megatron's
//! `_communicate` (megatron/core/pipeline_parallel/p2p_communication.py) with `batch_p2p_comm` becomes one
//! `torch.distributed.batch_isend_irecv`, i.e. one NCCL group holding, in `_batched_p2p_ops` order, send to the
//! previous stage, recv from the previous stage, send to the next stage, recv from the next stage. Around it,
//! PyTorch's ProcessGroupNCCL first makes the NCCL stream wait for the current (compute) stream (an event), and
//! `req.wait()` makes the compute stream wait for an event recorded on the NCCL stream after the group (PyTorch PR
//! 82450; Megatron's extra `torch.cuda.synchronize()` of `batch_p2p_sync` is left out, so the events alone must
//! order everything). Forward kernels take 1 ms and backward kernels 2 ms per stage; an interleaved stage's v chunks
//! each hold 1/v of its layers, so a chunk's kernels take 1/v of that.
//!
//! The order of forward passes, backward passes and `_communicate` calls on each stage is a transcription of
//! megatron/core/pipeline_parallel/schedules.py: `forward_backward_pipelining_without_interleaving` (1F1B: warm-up of
//! `stages - stage - 1` forward passes, steady 1F1B, cool-down) and `forward_backward_pipelining_with_interleaving`
//! (warm-up of `2 (stages - stage - 1) + (chunks - 1) stages`, all of them when `microbatches == stages`; chunk ids
//! from `get_model_chunk_id`; activations of the last stage's chunk `c` go to the first stage's chunk `c + 1`, wrapping
//! around as `get_pipeline_model_parallel_next_rank` does). GPipe is the 1F1B function with every forward pass in the
//! warm-up. [`plan`] builds that order; [`verify`] checks that every send meets the recv of the same tensor
//! (positional matching, N3) and that every kernel's input has been received before it runs.
//!
//! Variants: `Bug` issues each call's sends before its recvs, ungrouped (the pattern of NCCL issue 1456: neighbours
//! that send to each other at once deadlock under rendezvous); `Race` records the end event inside the group, before
//! `ncclGroupEnd` (N10: it orders nothing, as in PyTorch before PR 82450).

use std::fmt::Write as _;

/// Which pipeline schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Every forward pass, then every backward pass (Megatron's 1F1B function with all microbatches in the warm-up).
    Gpipe,
    /// Megatron's `forward_backward_pipelining_without_interleaving`.
    OneFOneB,
    /// Megatron's `forward_backward_pipelining_with_interleaving` (virtual pipeline stages, `chunks` per rank).
    Interleaved,
}

impl Schedule {
    /// The name the command line uses (`gpipe`, `1f1b`, `interleaved`).
    pub fn name(self) -> &'static str {
        match self {
            Schedule::Gpipe => "gpipe",
            Schedule::OneFOneB => "1f1b",
            Schedule::Interleaved => "interleaved",
        }
    }
}

/// Correct program, or one of the two seeded mistakes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Grouped send/recv, events after the group: no deadlock, race or undefined behaviour.
    Correct,
    /// Each `_communicate` call issues its sends, then its recvs, each ungrouped: neighbours that send to each other
    /// at once wait for each other's recv (a deadlock under rendezvous, N2).
    Bug,
    /// The NCCL→compute event is recorded inside the group, before `ncclGroupEnd`: it orders nothing (N10), so the
    /// consumer kernel races with the recv (and the next writer with the send).
    Race,
}

impl Variant {
    /// `correct`, `bug` or `race`.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Correct => "correct",
            Variant::Bug => "bug",
            Variant::Race => "race",
        }
    }
}

/// What to generate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineOptions {
    pub schedule: Schedule,
    /// Pipeline stages = ranks (at least 2; at least 3 for interleaved, as Megatron requires).
    pub stages: u32,
    /// Microbatches per iteration (at least 1; a multiple of `stages` for interleaved).
    pub microbatches: u32,
    /// Model chunks per stage (virtual pipeline size): 1 unless interleaved, where it is at least 1.
    pub chunks: u32,
    /// Bytes of every activation and gradient message.
    pub bytes: u64,
    pub variant: Variant,
    /// Write one `main` thread per rank with every op spelled out, instead of one thread that runs on every rank
    /// with loops and conditions on `stage` (the SPMD form, as Megatron's code is written). The interleaved schedule
    /// is always written unrolled: its per-chunk microbatch counters are state a loop of the format cannot carry.
    /// Both forms load to the same program (tests/pipeline.rs).
    pub unroll: bool,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            schedule: Schedule::OneFOneB,
            stages: 4,
            microbatches: 8,
            chunks: 1,
            bytes: 16 << 20,
            variant: Variant::Correct,
            unroll: false,
        }
    }
}

/// Forward passes (activations, sent to the next stage) or backward passes (gradients, sent to the previous stage).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pass {
    Forward,
    Backward,
}

/// A tensor of one stage: the activation or gradient of a model chunk and microbatch. Named as its stage names it:
/// on the sending side the output (`y`, activation out; `dx`, gradient with respect to the input), on the receiving
/// side the input (`x`, activation in; `dy`, gradient with respect to the output).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tensor {
    pub pass: Pass,
    pub chunk: u32,
    pub microbatch: u32,
}

/// One step of a stage, in issue order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `forward_step` of a chunk and microbatch: reads its input activation, writes its output activation.
    Forward { chunk: u32, microbatch: u32 },
    /// `backward_step`: reads the output gradient and the saved input, writes the input gradient.
    Backward { chunk: u32, microbatch: u32 },
    /// One `_communicate` call (one `batch_isend_irecv`), named after Megatron's wrapper (`send_forward`, ...).
    /// Sends name the sender's output tensor, recvs the receiver's input tensor.
    Comm { call: &'static str, send_prev: Option<Tensor>, recv_prev: Option<Tensor>, send_next: Option<Tensor>, recv_next: Option<Tensor> },
}

/// Invalid options, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionsError(pub String);

impl std::fmt::Display for OptionsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OptionsError {}

/// Checks the options against what Megatron accepts.
pub fn validate(o: &PipelineOptions) -> Result<(), OptionsError> {
    let err = |s: String| Err(OptionsError(s));
    if o.stages < 2 {
        return err(format!("a pipeline needs at least 2 stages, not {}", o.stages));
    }
    // One rank per stage: a program with more ranks would not load (`gen` wrote 5000 stages that `check` refused).
    if o.stages > cuorder_model::format::MAX_RANKS {
        return err(format!(
            "a pipeline has one rank per stage and a program at most MAX_RANKS = {} ranks, not {}",
            cuorder_model::format::MAX_RANKS,
            o.stages
        ));
    }
    if o.microbatches == 0 {
        return err("a pipeline needs at least 1 microbatch".into());
    }
    if o.bytes == 0 {
        return err("messages need at least 1 byte".into());
    }
    match o.schedule {
        Schedule::Interleaved => {
            if o.chunks == 0 {
                return err("the interleaved schedule needs at least 1 chunk per stage".into());
            }
            // megatron/core/parallel_state.py: "pipeline-model-parallel size should be greater than 2 with
            // interleaved schedule" (with 2 stages, prev == next and the two directions of one group would match
            // the wrong tensors).
            if o.stages < 3 {
                return err(format!("the interleaved schedule needs at least 3 stages (Megatron: \"pipeline-model-parallel size should be greater than 2 with interleaved schedule\"), not {}", o.stages));
            }
            // schedules.py: "number of microbatches is not divisible by pipeline-parallel size when using
            // interleaved schedule".
            if o.microbatches % o.stages != 0 {
                return err(format!(
                    "the interleaved schedule needs a number of microbatches divisible by the number of stages ({} is not divisible by {})",
                    o.microbatches, o.stages
                ));
            }
        }
        Schedule::Gpipe | Schedule::OneFOneB => {
            if o.chunks != 1 {
                return err(format!("--chunks applies only to the interleaved schedule ({} has 1 chunk per stage)", o.schedule.name()));
            }
        }
    }
    if o.variant == Variant::Bug && o.schedule == Schedule::Gpipe {
        return err("GPipe never sends and receives in one call (each call is a lone send or a lone recv), so it has no send-before-recv to get wrong: use --bug with 1f1b or interleaved".into());
    }
    // With one microbatch every 1F1B call is a lone send or recv too (regression: `--bug --microbatches 1` wrote a
    // program without the bug, which `check` found clean).
    if o.variant == Variant::Bug && o.schedule == Schedule::OneFOneB && o.microbatches < 2 {
        return err("with 1 microbatch, 1F1B never sends and receives in one call (each call is a lone send or a lone recv), so it has no send-before-recv to get wrong: use --bug with at least 2 microbatches".into());
    }
    // Every stage runs a forward and a backward kernel per microbatch and chunk: a cheap lower bound on the ops,
    // checked before planning (regression: 2 stages x 2,000,000 microbatches wrote 240 MB that `check` could not
    // load); `pipeline` checks the exact count after planning.
    let at_least = 2 * u64::from(o.stages) * u64::from(o.microbatches) * u64::from(o.chunks);
    if at_least > MAX_EXPANDED_OPS as u64 {
        return err(too_many_ops(at_least, true));
    }
    Ok(())
}

use cuorder_model::format::MAX_EXPANDED_OPS;

fn too_many_ops(n: u64, at_least: bool) -> String {
    format!(
        "the program would expand to {}{n} operations, over the loader's limit MAX_EXPANDED_OPS = {MAX_EXPANDED_OPS}: use fewer stages, microbatches or chunks",
        if at_least { "at least " } else { "" }
    )
}

/// The ops the program of `plan` expands to: per stage its kernels, each call's sends and recvs with the events
/// around them (and the group's start and end unless `Bug`), and the final synchronize.
fn expanded_ops(o: &PipelineOptions, plan: &[Vec<Step>]) -> u64 {
    let per_call = if o.variant == Variant::Bug { 4 } else { 6 };
    let step_ops = |st: &Step| match st {
        Step::Forward { .. } | Step::Backward { .. } => 1,
        Step::Comm { send_prev, recv_prev, send_next, recv_next, .. } => {
            per_call + [send_prev, recv_prev, send_next, recv_next].iter().filter(|t| t.is_some()).count() as u64
        }
    };
    plan.iter().map(|steps| 1 + steps.iter().map(step_ops).sum::<u64>()).sum()
}

fn fwd(chunk: u32, microbatch: u32) -> Tensor {
    Tensor { pass: Pass::Forward, chunk, microbatch }
}

fn bwd(chunk: u32, microbatch: u32) -> Tensor {
    Tensor { pass: Pass::Backward, chunk, microbatch }
}

/// Per-chunk counters of one stage: forward and backward passes done, activations and gradients received. Megatron
/// runs the microbatches of one chunk in order, and the n-th tensor a chunk receives is that of its n-th microbatch.
struct Counters {
    forwards: Vec<u32>,
    backwards: Vec<u32>,
    acts_in: Vec<u32>,
    grads_in: Vec<u32>,
}

impl Counters {
    fn new(chunks: u32) -> Counters {
        let z = vec![0; chunks as usize];
        Counters { forwards: z.clone(), backwards: z.clone(), acts_in: z.clone(), grads_in: z }
    }
    fn forward(&mut self, c: u32) -> u32 {
        let m = self.forwards[c as usize];
        self.forwards[c as usize] += 1;
        m
    }
    fn backward(&mut self, c: u32) -> u32 {
        let m = self.backwards[c as usize];
        self.backwards[c as usize] += 1;
        m
    }
    fn act_in(&mut self, c: u32) -> Tensor {
        let m = self.acts_in[c as usize];
        self.acts_in[c as usize] += 1;
        fwd(c, m)
    }
    fn grad_in(&mut self, c: u32) -> Tensor {
        let m = self.grads_in[c as usize];
        self.grads_in[c as usize] += 1;
        bwd(c, m)
    }
}

/// Pushes a `_communicate` call unless it has nothing to send or receive (then Megatron makes no NCCL call).
fn comm(steps: &mut Vec<Step>, call: &'static str, sp: Option<Tensor>, rp: Option<Tensor>, sn: Option<Tensor>, rn: Option<Tensor>) {
    if sp.is_some() || rp.is_some() || sn.is_some() || rn.is_some() {
        steps.push(Step::Comm { call, send_prev: sp, recv_prev: rp, send_next: sn, recv_next: rn });
    }
}

/// The steps of `stage` under 1F1B (or GPipe): `forward_backward_pipelining_without_interleaving`. The wrappers
/// `recv_forward`, `send_forward`, ... of p2p_communication.py make no call on the first stage (nothing from prev) or
/// the last (nothing to next).
fn one_f_one_b(o: &PipelineOptions, stage: u32) -> Vec<Step> {
    let (s, m) = (o.stages, o.microbatches);
    let first = stage == 0;
    let last = stage == s - 1;
    let warmup = if o.schedule == Schedule::Gpipe { m } else { (s - stage - 1).min(m) };
    let remaining = m - warmup;
    let mut n = Counters::new(1);
    let mut steps = Vec::new();
    let recv_forward = |steps: &mut Vec<Step>, n: &mut Counters| {
        if !first {
            let t = n.act_in(0);
            comm(steps, "recv_forward", None, Some(t), None, None);
        }
    };
    // Warm-up forward passes.
    for _ in 0..warmup {
        recv_forward(&mut steps, &mut n);
        let mb = n.forward(0);
        steps.push(Step::Forward { chunk: 0, microbatch: mb });
        if !last {
            comm(&mut steps, "send_forward", None, None, Some(fwd(0, mb)), None);
        }
    }
    // Before 1F1B, the first forward tensor of the steady state.
    if remaining > 0 {
        recv_forward(&mut steps, &mut n);
    }
    // Steady 1F1B.
    for i in 0..remaining {
        let last_iteration = i == remaining - 1;
        let mb = n.forward(0);
        steps.push(Step::Forward { chunk: 0, microbatch: mb });
        if !last {
            let g = n.grad_in(0);
            comm(&mut steps, "send_forward_recv_backward", None, None, Some(fwd(0, mb)), Some(g));
        }
        let b = n.backward(0);
        steps.push(Step::Backward { chunk: 0, microbatch: b });
        if !first {
            if last_iteration {
                comm(&mut steps, "send_backward", Some(bwd(0, b)), None, None, None);
            } else {
                let t = n.act_in(0);
                comm(&mut steps, "send_backward_recv_forward", Some(bwd(0, b)), Some(t), None, None);
            }
        }
    }
    // Cool-down backward passes.
    for _ in 0..warmup {
        if !last {
            let g = n.grad_in(0);
            comm(&mut steps, "recv_backward", None, None, None, Some(g));
        }
        let b = n.backward(0);
        steps.push(Step::Backward { chunk: 0, microbatch: b });
        if !first {
            comm(&mut steps, "send_backward", Some(bwd(0, b)), None, None, None);
        }
    }
    steps
}

/// The steps of `stage` under the interleaved schedule: `forward_backward_pipelining_with_interleaving` with
/// `overlap_p2p_comm` off (every call waits on its requests).
fn interleaved(o: &PipelineOptions, stage: u32) -> Vec<Step> {
    let (s, v) = (o.stages as i64, o.chunks as i64);
    let total = o.microbatches as i64 * v;
    let first = stage == 0;
    let last = stage as i64 == s - 1;
    let all_warmup = o.microbatches as i64 == s;
    let warmup = if all_warmup { total } else { ((s - stage as i64 - 1) * 2 + (v - 1) * s).min(total) };
    let remaining = total - warmup;
    // get_model_chunk_id; Python's % is Euclidean for a positive divisor (the steady state asks for negative ids).
    let chunk_id = |k: i64, forward: bool| -> u32 {
        let c = k.rem_euclid(s * v) / s;
        (if forward { c } else { v - c - 1 }) as u32
    };
    // is_pipeline_first_stage / is_pipeline_last_stage with the virtual rank set to `chunk`.
    let first_virtual = |chunk: u32| first && chunk == 0;
    let last_virtual = |chunk: u32| last && chunk as i64 == v - 1;
    let mut n = Counters::new(o.chunks);
    let mut steps = Vec::new();

    // Warm-up: recv_forward with the virtual rank set to 0 (nothing on the first stage).
    if !first_virtual(0) {
        let t = n.act_in(0);
        comm(&mut steps, "recv_forward", None, Some(t), None, None);
    }
    for k in 0..warmup {
        let c = chunk_id(k, true);
        let mb = n.forward(c);
        steps.push(Step::Forward { chunk: c, microbatch: mb });
        let next_c = chunk_id(k + 1, true);
        let mut recv_prev = true;
        if first && next_c == 0 {
            recv_prev = false;
        }
        if k == total - 1 {
            recv_prev = false;
        }
        let send = (!last_virtual(c)).then(|| fwd(c, mb));
        let rp = recv_prev.then(|| n.act_in(next_c));
        if k == warmup - 1 && !all_warmup {
            let rn = (!last).then(|| n.grad_in(o.chunks - 1));
            comm(&mut steps, "send_forward_backward_recv_forward_backward", None, rp, send, rn);
        } else {
            comm(&mut steps, "send_forward_recv_forward", None, rp, send, None);
        }
    }
    // Steady 1F1B: forward, backward, then one call for both directions.
    for k in 0..remaining {
        let fk = k + warmup;
        let cf = chunk_id(fk, true);
        let mf = n.forward(cf);
        steps.push(Step::Forward { chunk: cf, microbatch: mf });
        let bk = k;
        let cb = chunk_id(bk, false);
        let mb = n.backward(cb);
        steps.push(Step::Backward { chunk: cb, microbatch: mb });
        let send_next = (!last_virtual(cf)).then(|| fwd(cf, mf));
        let send_prev = (!first_virtual(cb)).then(|| bwd(cb, mb));
        let mut recv_prev = true;
        let next_fc = if first {
            // First stage is ahead of last stage by (pipeline_parallel_size - 1).
            let c = chunk_id(fk - (s - 1), true);
            if c as i64 == v - 1 {
                recv_prev = false;
            }
            c + 1
        } else {
            chunk_id(fk + 1, true)
        };
        let mut recv_next = true;
        let next_bc = if last {
            // Last stage is ahead of first stage by (pipeline_parallel_size - 1).
            let c = chunk_id(bk - (s - 1), false);
            if c == 0 {
                recv_next = false;
            }
            c.wrapping_sub(1)
        } else {
            chunk_id(bk + 1, false)
        };
        if k == remaining - 1 {
            recv_prev = false;
        }
        let rp = recv_prev.then(|| n.act_in(next_fc));
        let rn = recv_next.then(|| n.grad_in(next_bc));
        comm(&mut steps, "send_forward_backward_recv_forward_backward", send_prev, rp, send_next, rn);
    }
    // Cool-down backward passes.
    if all_warmup && !last {
        let g = n.grad_in(o.chunks - 1);
        comm(&mut steps, "recv_backward", None, None, None, Some(g));
    }
    for k in remaining..total {
        let cb = chunk_id(k, false);
        let mb = n.backward(cb);
        steps.push(Step::Backward { chunk: cb, microbatch: mb });
        let next_bc = chunk_id(k + 1, false);
        let mut recv_next = true;
        if last && next_bc as i64 == v - 1 {
            recv_next = false;
        }
        if k == total - 1 {
            recv_next = false;
        }
        let send_prev = (!first_virtual(cb)).then(|| bwd(cb, mb));
        let rn = recv_next.then(|| n.grad_in(next_bc));
        comm(&mut steps, "send_backward_recv_backward", send_prev, None, None, rn);
    }
    steps
}

/// The steps of every stage, index = stage = rank.
///
/// Errors: the options break a rule of [`validate`].
pub fn plan(o: &PipelineOptions) -> Result<Vec<Vec<Step>>, OptionsError> {
    validate(o)?;
    Ok((0..o.stages)
        .map(|s| match o.schedule {
            Schedule::Gpipe | Schedule::OneFOneB => one_f_one_b(o, s),
            Schedule::Interleaved => interleaved(o, s),
        })
        .collect())
}

/// Where a tensor sent by `from` lands: its input tensor on the receiving stage. Activations of the last stage's
/// chunk `c` become the first stage's chunk `c + 1`; gradients of the first stage's chunk `c` the last stage's
/// chunk `c - 1`.
fn arrives_as(t: Tensor, from: u32, to: u32) -> Tensor {
    let chunk = match t.pass {
        Pass::Forward if to < from => t.chunk + 1,
        Pass::Backward if to > from => t.chunk - 1,
        _ => t.chunk,
    };
    Tensor { chunk, ..t }
}

/// Checks a plan: the n-th send from one stage to another carries the tensor the n-th recv there expects (NCCL
/// matches sends and recvs by position, N3), every send and recv has its counterpart, every forward pass has
/// received its input and every backward pass its output gradient and its own forward pass before it runs, and every
/// stage runs the forward and backward pass of every chunk and microbatch once.
///
/// Errors: the first inconsistency, in words (a bug of this module).
pub fn verify(o: &PipelineOptions, plan: &[Vec<Step>]) -> Result<(), String> {
    use std::collections::{BTreeMap, BTreeSet};
    let s = o.stages;
    let prev = |st: u32| (st + s - 1) % s;
    let next = |st: u32| (st + 1) % s;
    // (from, to) -> tensors in issue order, as the receiver names them.
    let mut sent: BTreeMap<(u32, u32), Vec<Tensor>> = BTreeMap::new();
    let mut recvd: BTreeMap<(u32, u32), Vec<Tensor>> = BTreeMap::new();
    for (st, steps) in plan.iter().enumerate() {
        let st = st as u32;
        let mut have: BTreeSet<Tensor> = BTreeSet::new();
        let mut done: BTreeSet<(Pass, u32, u32)> = BTreeSet::new();
        for step in steps {
            match *step {
                Step::Forward { chunk, microbatch } => {
                    let needs_input = !(st == 0 && chunk == 0);
                    if needs_input && !have.contains(&fwd(chunk, microbatch)) {
                        return Err(format!("stage {st}: forward c{chunk} m{microbatch} before its input arrived"));
                    }
                    if !done.insert((Pass::Forward, chunk, microbatch)) {
                        return Err(format!("stage {st}: forward c{chunk} m{microbatch} twice"));
                    }
                }
                Step::Backward { chunk, microbatch } => {
                    let needs_grad = !(st == s - 1 && chunk == o.chunks - 1);
                    if needs_grad && !have.contains(&bwd(chunk, microbatch)) {
                        return Err(format!("stage {st}: backward c{chunk} m{microbatch} before its gradient arrived"));
                    }
                    if !done.contains(&(Pass::Forward, chunk, microbatch)) {
                        return Err(format!("stage {st}: backward c{chunk} m{microbatch} before its forward pass"));
                    }
                    if !done.insert((Pass::Backward, chunk, microbatch)) {
                        return Err(format!("stage {st}: backward c{chunk} m{microbatch} twice"));
                    }
                }
                Step::Comm { send_prev, recv_prev, send_next, recv_next, call } => {
                    for (t, to, pass) in [(send_prev, prev(st), Pass::Backward), (send_next, next(st), Pass::Forward)] {
                        if let Some(t) = t {
                            if t.pass != pass || !done.contains(&(t.pass, t.chunk, t.microbatch)) {
                                return Err(format!("stage {st}: {call} sends {t:?} that it has not computed"));
                            }
                            sent.entry((st, to)).or_default().push(arrives_as(t, st, to));
                        }
                    }
                    for (t, from, pass) in [(recv_prev, prev(st), Pass::Forward), (recv_next, next(st), Pass::Backward)] {
                        if let Some(t) = t {
                            if t.pass != pass {
                                return Err(format!("stage {st}: {call} receives {t:?} from the wrong side"));
                            }
                            recvd.entry((from, st)).or_default().push(t);
                            have.insert(t);
                        }
                    }
                }
            }
        }
        let want = 2 * o.microbatches as usize * o.chunks as usize;
        if done.len() != want {
            return Err(format!("stage {st}: {} passes, expected {want}", done.len()));
        }
    }
    if sent != recvd {
        for (pair, ts) in &sent {
            let rs = recvd.get(pair).map(Vec::as_slice).unwrap_or(&[]);
            if ts.as_slice() != rs {
                return Err(format!("stage {} → {}: sends {ts:?} but receives {rs:?}", pair.0, pair.1));
            }
        }
        return Err("a recv without a send".into());
    }
    Ok(())
}

/// A buffer name: `x` (activation in), `y` (activation out), `dy` (gradient in), `dx` (gradient out), then the chunk
/// (only with several chunks) and the microbatch: `x3`, `dy1.3`.
fn buf(prefix: &str, chunks: u32, chunk: u32, mb: u32) -> String {
    if chunks == 1 {
        format!("{prefix}{mb}")
    } else {
        format!("{prefix}{chunk}.{mb}")
    }
}

fn tensor_buf(t: Tensor, chunks: u32, outgoing: bool) -> String {
    let prefix = match (t.pass, outgoing) {
        (Pass::Forward, false) => "x",
        (Pass::Forward, true) => "y",
        (Pass::Backward, false) => "dy",
        (Pass::Backward, true) => "dx",
    };
    buf(prefix, chunks, t.chunk, t.microbatch)
}

/// The `cuorder gen pipeline` command line that produces `o`.
pub fn command_line(o: &PipelineOptions) -> String {
    let mut s = format!("cuorder gen pipeline --schedule {} --stages {} --microbatches {}", o.schedule.name(), o.stages, o.microbatches);
    if o.schedule == Schedule::Interleaved {
        write!(s, " --chunks {}", o.chunks).unwrap();
    }
    write!(s, " --bytes {}", o.bytes).unwrap();
    match o.variant {
        Variant::Correct => {}
        Variant::Bug => s.push_str(" --bug"),
        Variant::Race => s.push_str(" --race"),
    }
    if o.unroll {
        s.push_str(" --unroll");
    }
    s
}

/// Whether [`pipeline`] writes `o` unrolled (one thread per rank): asked for, or the interleaved schedule.
pub fn is_unrolled(o: &PipelineOptions) -> bool {
    o.unroll || o.schedule == Schedule::Interleaved
}

fn size_text(bytes: u64) -> String {
    for (unit, scale) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if bytes >= scale && bytes % scale == 0 {
            return format!("{} {unit}", bytes / scale);
        }
    }
    format!("{bytes} B")
}

/// The program of `o` in the surface format (docs/program-format.md): a header comment saying the schedule, stages,
/// microbatches, chunks, message size and variant, then either one `main` thread that runs on every rank, with loops
/// over microbatches and conditions on `stage` (GPipe and 1F1B unless `o.unroll`; [`spmd_thread`]), or one `main`
/// thread per rank (`ranks: [stage]`) with every op spelled out. Peers are explicit (`Rank(stage + 1)`,
/// `Rank(k)`), so that the first stage has no previous and the last no next stage (`Next`/`Prev` would wrap). The
/// SPMD text of 1F1B 1024 × 64 is a few kilobytes where the unrolled one is 82 MB; both load to the same ops. The
/// same options give the same bytes.
///
/// Errors: the options break a rule of [`validate`].
pub fn pipeline(o: &PipelineOptions) -> Result<String, OptionsError> {
    let plan = plan(o)?;
    if let Err(e) = verify(o, &plan) {
        panic!("internal error: the {} plan is inconsistent: {e}", o.schedule.name());
    }
    let ops = expanded_ops(o, &plan);
    if ops > MAX_EXPANDED_OPS as u64 {
        return Err(OptionsError(too_many_ops(ops, false)));
    }
    let (s, v) = (o.stages, o.chunks);
    let mut out = String::with_capacity(plan.iter().map(|p| p.len()).sum::<usize>() * 160 + 4096);
    let sched = match o.schedule {
        Schedule::Gpipe => "GPipe (all forward passes, then all backward passes)".to_string(),
        Schedule::OneFOneB => "1F1B (Megatron-LM forward_backward_pipelining_without_interleaving)".to_string(),
        Schedule::Interleaved => "interleaved 1F1B (Megatron-LM forward_backward_pipelining_with_interleaving)".to_string(),
    };
    let variant = match o.variant {
        Variant::Correct => "correct: grouped send/recv, events after the group",
        Variant::Bug => "bug: each call's sends before its recvs, ungrouped (neighbours sending to each other deadlock under rendezvous, N2)",
        Variant::Race => "race: the NCCL end event recorded inside the group, before ncclGroupEnd (it orders nothing, N10)",
    };
    writeln!(out, "// Generated by `{}`.", command_line(o)).unwrap();
    writeln!(out, "//").unwrap();
    writeln!(out, "// Schedule: {sched}.").unwrap();
    writeln!(out, "// Stages: {s} (one rank each). Microbatches: {}. Chunks per stage: {v}.", o.microbatches).unwrap();
    writeln!(out, "// Bytes per activation/gradient message: {} ({}).", o.bytes, size_text(o.bytes)).unwrap();
    writeln!(out, "// Variant: {variant}.").unwrap();
    if is_unrolled(o) {
        writeln!(out, "// Form: unrolled, one thread per rank with every op written out.").unwrap();
    } else {
        writeln!(out, "// Form: SPMD, one thread that every rank runs, as Megatron's code is written (`--unroll` writes each rank's ops).").unwrap();
    }
    writeln!(out, "//").unwrap();
    writeln!(out, "// Each `_communicate` call of Megatron's p2p_communication.py is one batch_isend_irecv (one NCCL group: send to").unwrap();
    writeln!(out, "// prev, recv from prev, send to next, recv from next) on the NCCL stream. Before it the NCCL stream waits for the").unwrap();
    writeln!(out, "// compute stream (event `c`, ProcessGroupNCCL); after it req.wait() makes the compute stream wait for event `n`").unwrap();
    writeln!(out, "// recorded on the NCCL stream after the group. Buffers: x = activation in, y = activation out, dy = gradient in,").unwrap();
    writeln!(out, "// dx = gradient out, dw = weight gradient; then {}the microbatch. Forward 1 ms, backward 2 ms{}.",
        if v > 1 { "the chunk, a dot and " } else { "" },
        if v > 1 {
            format!(" per stage: each of a stage's {v} chunks holds 1/{v} of its layers (Megatron's virtual pipeline), so a chunk's forward takes {} and its backward {}", chunk_duration(1, v), chunk_duration(2, v))
        } else {
            String::new()
        }).unwrap();
    match o.variant {
        Variant::Correct => {}
        Variant::Bug => writeln!(out, "// This variant departs from that: each call issues its sends, then its recvs, with no group around them.").unwrap(),
        Variant::Race => writeln!(out, "// This variant departs from that: event `n` is recorded inside the group, before its ncclGroupEnd.").unwrap(),
    }
    out.push_str("Program(\n");
    writeln!(out, "    ranks: {s},").unwrap();
    out.push_str("    streams: [Stream(\"compute\", NonBlocking), Stream(\"nccl\", NonBlocking)],\n");
    out.push_str("    events: [\"c\", \"n\"],\n");
    out.push_str("    buffers: [\n");
    let size = size_text(o.bytes);
    for c in 0..v {
        for prefix in ["x", "y", "dy", "dx"] {
            out.push_str("       ");
            for m in 0..o.microbatches {
                write!(out, " Buffer(\"{}\", \"{size}\"),", buf(prefix, v, c, m)).unwrap();
            }
            out.push('\n');
        }
    }
    for c in 0..v {
        let name = if v == 1 { "dw".to_string() } else { format!("dw{c}") };
        writeln!(out, "        Buffer(\"{name}\", \"{size}\"),").unwrap();
    }
    out.push_str("    ],\n");
    out.push_str("    comms: [Comm(\"pp\")],\n");
    out.push_str("    threads: [\n");
    if !is_unrolled(o) {
        spmd_thread(&mut out, o);
        out.push_str("    ],\n)\n");
        return Ok(out);
    }
    for (st, steps) in plan.iter().enumerate() {
        let st = st as u32;
        let (nf, nb) = steps.iter().fold((0, 0), |(f, b), x| match x {
            Step::Forward { .. } => (f + 1, b),
            Step::Backward { .. } => (f, b + 1),
            Step::Comm { .. } => (f, b),
        });
        let ncomm = steps.len() - nf - nb;
        writeln!(out, "        // Stage {st}: {nf} forward and {nb} backward passes, {ncomm} communication calls.").unwrap();
        writeln!(out, "        Thread(\"main\", ranks: [{st}], ops: [").unwrap();
        for step in steps {
            render_step(&mut out, o, st, step);
        }
        out.push_str("            DeviceSync,\n");
        out.push_str("        ]),\n");
    }
    out.push_str("    ],\n)\n");
    Ok(out)
}

/// The ops of one `_communicate` call as the variant writes them, around `ops` (sends and recvs in
/// `_batched_p2p_ops` order, already rendered), at `indent`.
fn comm_ops(o: &PipelineOptions, indent: &str, ops: &[String]) -> String {
    let mut out = String::new();
    writeln!(out, "{indent}Record(\"c\", stream: \"compute\"), Wait(\"c\", stream: \"nccl\"),").unwrap();
    match o.variant {
        Variant::Correct => {
            writeln!(out, "{indent}Group([{}]),", ops.join(", ")).unwrap();
            writeln!(out, "{indent}Record(\"n\", stream: \"nccl\"), Wait(\"n\", stream: \"compute\"),").unwrap();
        }
        Variant::Bug => {
            writeln!(out, "{indent}{},", ops.join(", ")).unwrap();
            writeln!(out, "{indent}Record(\"n\", stream: \"nccl\"), Wait(\"n\", stream: \"compute\"),").unwrap();
        }
        Variant::Race => {
            writeln!(out, "{indent}GroupStart, {}, Record(\"n\", stream: \"nccl\"), GroupEnd,", ops.join(", ")).unwrap();
            writeln!(out, "{indent}Wait(\"n\", stream: \"compute\"),").unwrap();
        }
    }
    out
}

/// The SPMD form of GPipe and 1F1B: one `main` thread on every rank, `forward_backward_pipelining_without_interleaving`
/// with `stage` the rank. With `W = min(stages - stage - 1, M)` warm-up forward passes (`M` for GPipe): warm-up
/// microbatches `0..W` (recv_forward, forward, send_forward), the first steady activation, steady iterations
/// `i in 0..M - W` (forward `W + i`, send_forward_recv_backward, backward `i`, send_backward_recv_forward or, last,
/// send_backward), cool-down backward passes `M - W..M` (recv_backward, backward, send_backward). The first stage
/// receives nothing from before it and the last sends nothing after it (`If(stage > 0, ..)`, `If(stage < stages -
/// 1, ..)`), as Megatron's wrappers make no call there; the Bug variant writes each call's sends before its recvs,
/// which for these calls (one direction each) is the grouped order. Every microbatch index matches [`plan`]'s
/// counters (tests/pipeline.rs compares the loaded programs).
fn spmd_thread(out: &mut String, o: &PipelineOptions) {
    let m = o.microbatches;
    let gpipe = o.schedule == Schedule::Gpipe;
    // Megatron: num_warmup_microbatches = min(pipeline_parallel_size - rank - 1, num_microbatches).
    let w = if gpipe { m.to_string() } else { format!("min(stages - stage - 1, {m})") };
    let send = |to: &str, buf: &str| format!("Send(to: Rank({to}), buf: \"{buf}\", stream: \"nccl\")");
    let recv = |from: &str, buf: &str| format!("Recv(from: Rank({from}), buf: \"{buf}\", stream: \"nccl\")");
    let call = |indent: &str, comment: &str, ops: &[String]| format!("{indent}// {comment}\n{}", comm_ops(o, indent, ops));
    let fwd = |indent: &str, k: &str| {
        format!(
            "{indent}If(stage > 0, then: [Kernel(\"fwd m{{{k}}}\", stream: \"compute\", reads: [\"x{{{k}}}\"], writes: [\"y{{{k}}}\"], duration: \"1 ms\")],\n\
             {indent}    else: [Kernel(\"fwd m{{{k}}}\", stream: \"compute\", writes: [\"y{{{k}}}\"], duration: \"1 ms\")]),\n"
        )
    };
    // The first stage reads no input activation and writes no input gradient; the last reads no output gradient.
    let bwd = |indent: &str, k: &str| {
        let kernel = |reads: &str, writes: &str| {
            format!("Kernel(\"bwd m{{{k}}}\", stream: \"compute\", reads: [{reads}], writes: [{writes}], duration: \"2 ms\")")
        };
        let (dy, x, dx) = (format!("\"dy{{{k}}}\""), format!("\"x{{{k}}}\""), format!("\"dx{{{k}}}\""));
        format!(
            "{indent}If(stage == 0, then: [{}],\n\
             {indent}    else: [If(stage == stages - 1, then: [{}],\n\
             {indent}        else: [{}])]),\n",
            kernel(&dy, "\"dw\""),
            kernel(&x, &format!("\"dw\", {dx}")),
            kernel(&format!("{dy}, {x}"), &format!("\"dw\", {dx}")),
        )
    };
    let (i1, i2, i3) = ("            ", "                ", "                    ");
    out.push_str("        // Every rank runs this thread; `stage` is its rank. ");
    if gpipe {
        writeln!(out, "GPipe: {m} forward passes, then {m} backward passes.").unwrap();
    } else {
        writeln!(out, "Warm-up: W = min(stages - stage - 1, {m}) forward passes;").unwrap();
        writeln!(out, "        // steady 1F1B: {m} - W forward/backward pairs; cool-down: W backward passes.").unwrap();
    }
    out.push_str("        Thread(\"main\", ops: [\n");
    // Warm-up forward passes.
    writeln!(out, "{i1}For(i, \"0..{w}\", [").unwrap();
    writeln!(out, "{i2}If(stage > 0, [").unwrap();
    out.push_str(&call(i3, "recv_forward: x{i} ← stage - 1", &[recv("stage - 1", "x{i}")]));
    writeln!(out, "{i2}]),").unwrap();
    out.push_str(&fwd(i2, "i"));
    writeln!(out, "{i2}If(stage < stages - 1, [").unwrap();
    out.push_str(&call(i3, "send_forward: y{i} → stage + 1", &[send("stage + 1", "y{i}")]));
    writeln!(out, "{i2}]),").unwrap();
    writeln!(out, "{i1}]),").unwrap();
    if !gpipe {
        // The first activation of the steady state, then steady 1F1B.
        writeln!(out, "{i1}If(\"{w} < {m} && stage > 0\", [").unwrap();
        out.push_str(&call(i2, &format!("recv_forward: x{{{w}}} ← stage - 1"), &[recv("stage - 1", &format!("x{{{w}}}"))]));
        writeln!(out, "{i1}]),").unwrap();
        writeln!(out, "{i1}For(i, \"0..{m} - {w}\", [").unwrap();
        let f = format!("{w} + i");
        out.push_str(&fwd(i2, &f));
        writeln!(out, "{i2}If(stage < stages - 1, [").unwrap();
        out.push_str(&call(
            i3,
            &format!("send_forward_recv_backward: y{{{f}}} → stage + 1, dy{{i}} ← stage + 1"),
            &[send("stage + 1", &format!("y{{{f}}}")), recv("stage + 1", "dy{i}")],
        ));
        writeln!(out, "{i2}]),").unwrap();
        out.push_str(&bwd(i2, "i"));
        writeln!(out, "{i2}If(stage > 0, then: [If(\"i == {m} - {w} - 1\", then: [").unwrap();
        let i4 = "                        ";
        out.push_str(&call(i4, "send_backward: dx{i} → stage - 1", &[send("stage - 1", "dx{i}")]));
        writeln!(out, "{i3}], else: [").unwrap();
        out.push_str(&call(
            i4,
            &format!("send_backward_recv_forward: dx{{i}} → stage - 1, x{{{f} + 1}} ← stage - 1"),
            &[send("stage - 1", "dx{i}"), recv("stage - 1", &format!("x{{{f} + 1}}"))],
        ));
        writeln!(out, "{i3}])]),").unwrap();
        writeln!(out, "{i1}]),").unwrap();
    }
    // Cool-down backward passes.
    let from = if gpipe { "0".to_string() } else { format!("{m} - {w}") };
    writeln!(out, "{i1}For(i, \"{from}..{m}\", [").unwrap();
    writeln!(out, "{i2}If(stage < stages - 1, [").unwrap();
    out.push_str(&call(i3, "recv_backward: dy{i} ← stage + 1", &[recv("stage + 1", "dy{i}")]));
    writeln!(out, "{i2}]),").unwrap();
    out.push_str(&bwd(i2, "i"));
    writeln!(out, "{i2}If(stage > 0, [").unwrap();
    out.push_str(&call(i3, "send_backward: dx{i} → stage - 1", &[send("stage - 1", "dx{i}")]));
    writeln!(out, "{i2}]),").unwrap();
    writeln!(out, "{i1}]),").unwrap();
    writeln!(out, "{i1}DeviceSync,").unwrap();
    out.push_str("        ]),\n");
}

/// The duration of one chunk's share of a stage's `ms` milliseconds when the stage holds `chunks` chunks (each
/// 1/chunks of its layers), as the format writes it: `"1 ms"` for one chunk, else whole microseconds or nanoseconds.
fn chunk_duration(ms: u64, chunks: u32) -> String {
    if chunks == 1 {
        return format!("{ms} ms");
    }
    let ns = ms * 1_000_000 / u64::from(chunks);
    if ns % 1_000 == 0 {
        format!("{} us", ns / 1_000)
    } else {
        format!("{ns} ns")
    }
}

fn render_step(out: &mut String, o: &PipelineOptions, st: u32, step: &Step) {
    let v = o.chunks;
    let label = |chunk: u32, mb: u32| if v == 1 { format!("m{mb}") } else { format!("c{chunk} m{mb}") };
    let dw = |chunk: u32| if v == 1 { "dw".to_string() } else { format!("dw{chunk}") };
    let q = |s: String| format!("\"{s}\"");
    match *step {
        Step::Forward { chunk, microbatch } => {
            let reads = if st == 0 && chunk == 0 { String::new() } else { format!("reads: [{}], ", q(buf("x", v, chunk, microbatch))) };
            writeln!(
                out,
                "            Kernel(\"fwd {}\", stream: \"compute\", {reads}writes: [{}], duration: \"{}\"),",
                label(chunk, microbatch),
                q(buf("y", v, chunk, microbatch)),
                chunk_duration(1, v)
            )
            .unwrap();
        }
        Step::Backward { chunk, microbatch } => {
            let mut reads = Vec::new();
            if !(st == o.stages - 1 && chunk == v - 1) {
                reads.push(q(buf("dy", v, chunk, microbatch)));
            }
            if !(st == 0 && chunk == 0) {
                reads.push(q(buf("x", v, chunk, microbatch)));
            }
            let mut writes = vec![q(dw(chunk))];
            if !(st == 0 && chunk == 0) {
                writes.push(q(buf("dx", v, chunk, microbatch)));
            }
            writeln!(
                out,
                "            Kernel(\"bwd {}\", stream: \"compute\", reads: [{}], writes: [{}], duration: \"{}\"),",
                label(chunk, microbatch),
                reads.join(", "),
                writes.join(", "),
                chunk_duration(2, v)
            )
            .unwrap();
        }
        Step::Comm { call, send_prev, recv_prev, send_next, recv_next } => {
            let s = o.stages;
            let prev = (st + s - 1) % s;
            let next = (st + 1) % s;
            let send = |t: Tensor, to: u32| format!("Send(to: Rank({to}), buf: \"{}\", stream: \"nccl\")", tensor_buf(t, v, true));
            let recv = |t: Tensor, from: u32| format!("Recv(from: Rank({from}), buf: \"{}\", stream: \"nccl\")", tensor_buf(t, v, false));
            // The comment: what moves where.
            let mut what = Vec::new();
            if let Some(t) = send_prev {
                what.push(format!("{} → stage {prev}", tensor_buf(t, v, true)));
            }
            if let Some(t) = recv_prev {
                what.push(format!("{} ← stage {prev}", tensor_buf(t, v, false)));
            }
            if let Some(t) = send_next {
                what.push(format!("{} → stage {next}", tensor_buf(t, v, true)));
            }
            if let Some(t) = recv_next {
                what.push(format!("{} ← stage {next}", tensor_buf(t, v, false)));
            }
            writeln!(out, "            // {call}: {}", what.join(", ")).unwrap();
            // _batched_p2p_ops order: send_prev, recv_prev, send_next, recv_next; the Bug variant: every send, then
            // every recv.
            let ops: Vec<String> = match o.variant {
                Variant::Correct | Variant::Race => [
                    send_prev.map(|t| send(t, prev)),
                    recv_prev.map(|t| recv(t, prev)),
                    send_next.map(|t| send(t, next)),
                    recv_next.map(|t| recv(t, next)),
                ]
                .into_iter()
                .flatten()
                .collect(),
                Variant::Bug => [
                    send_prev.map(|t| send(t, prev)),
                    send_next.map(|t| send(t, next)),
                    recv_prev.map(|t| recv(t, prev)),
                    recv_next.map(|t| recv(t, next)),
                ]
                .into_iter()
                .flatten()
                .collect(),
            };
            out.push_str(&comm_ops(o, "            ", &ops));
        }
    }
}

/// The same pipeline at stage granularity in Promela, for Spin: one proctype per stage, one rendezvous channel
/// (`[0]`) per direction between neighbours, carrying a tensor id (`chunk * microbatches + microbatch`) that the
/// receiver insists on (`eval`), so that a mismatched pair is a deadlock too. A grouped call lets its sends and recvs
/// happen in any order (nested `if`s whose options start with the op); the `Bug` variant sends, then receives, in order. Kernels and
/// the streams are left out (Spin sees only the messages); the `Race` variant is therefore the same as `Correct`.
///
/// Errors: the options break a rule of [`validate`].
pub fn promela(o: &PipelineOptions) -> Result<String, OptionsError> {
    let plan = plan(o)?;
    let s = o.stages;
    let m = o.microbatches;
    let mut out = String::new();
    writeln!(out, "/* Generated by `{} --emit promela`: {} stages, {} microbatches, {} chunks, stage granularity. */", command_line(o), s, m, o.chunks).unwrap();
    writeln!(out, "/* act[i]: stage i -> stage (i+1) mod S; grad[i]: stage (i+1) mod S -> stage i. Rendezvous channels. */").unwrap();
    writeln!(out, "chan act[{s}] = [0] of {{ int }};").unwrap();
    writeln!(out, "chan grad[{s}] = [0] of {{ int }};").unwrap();
    let id = |t: Tensor| t.chunk * m + t.microbatch;
    for (st, steps) in plan.iter().enumerate() {
        let st = st as u32;
        let prev = (st + s - 1) % s;
        writeln!(out, "\nproctype stage{st}() {{").unwrap();
        for step in steps {
            let Step::Comm { call, send_prev, recv_prev, send_next, recv_next } = *step else { continue };
            // act[st] goes to next; grad[prev] goes to prev; we receive activations on act[prev], gradients on grad[st].
            let ops: Vec<String> = [
                send_prev.map(|t| format!("grad[{prev}]!{}", id(arrives_as(t, st, prev)))),
                recv_prev.map(|t| format!("act[{prev}]?eval({})", id(t))),
                send_next.map(|t| format!("act[{st}]!{}", id(arrives_as(t, st, (st + 1) % s)))),
                recv_next.map(|t| format!("grad[{st}]?eval({})", id(t))),
            ]
            .into_iter()
            .flatten()
            .collect();
            writeln!(out, "  /* {call} */").unwrap();
            if ops.len() == 1 || o.variant == Variant::Bug {
                let (sends, recvs): (Vec<&String>, Vec<&String>) = ops.iter().partition(|x| x.contains('!'));
                for op in sends.into_iter().chain(recvs) {
                    writeln!(out, "  {op};").unwrap();
                }
            } else {
                any_order(&mut out, &ops, 1);
            }
        }
        writeln!(out, "}}").unwrap();
    }
    writeln!(out, "\ninit {{").unwrap();
    writeln!(out, "  atomic {{").unwrap();
    for st in 0..s {
        writeln!(out, "    run stage{st}();").unwrap();
    }
    writeln!(out, "  }}").unwrap();
    writeln!(out, "}}").unwrap();
    Ok(out)
}

/// The ops of a group in any order: an `if` whose options each start with one op (so an option is taken only when
/// its op can happen now), followed by the others in any order. At most 4 ops: at most 64 option lines.
fn any_order(out: &mut String, ops: &[String], depth: usize) {
    let pad = "  ".repeat(depth);
    if ops.len() == 1 {
        writeln!(out, "{pad}{};", ops[0]).unwrap();
        return;
    }
    writeln!(out, "{pad}if").unwrap();
    for i in 0..ops.len() {
        let rest: Vec<String> = ops.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, o)| o.clone()).collect();
        writeln!(out, "{pad}:: {} ->", ops[i]).unwrap();
        any_order(out, &rest, depth + 1);
    }
    writeln!(out, "{pad}fi;").unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(schedule: Schedule, stages: u32, microbatches: u32, chunks: u32) -> PipelineOptions {
        PipelineOptions { schedule, stages, microbatches, chunks, ..PipelineOptions::default() }
    }

    /// Every plan of every schedule over a range of sizes is consistent: the transcription of Megatron's loops
    /// sends every tensor to the recv that expects it.
    #[test]
    fn plans_are_consistent() {
        for s in 2..=9 {
            for m in 1..=20 {
                for sched in [Schedule::Gpipe, Schedule::OneFOneB] {
                    let o = opts(sched, s, m, 1);
                    verify(&o, &plan(&o).unwrap()).unwrap_or_else(|e| panic!("{o:?}: {e}"));
                }
                if s >= 3 && m % s == 0 {
                    for v in 1..=4 {
                        let o = opts(Schedule::Interleaved, s, m, v);
                        verify(&o, &plan(&o).unwrap()).unwrap_or_else(|e| panic!("{o:?}: {e}"));
                    }
                }
            }
        }
    }

    /// `verify` rejects a plan whose messages are crossed (it can fail).
    #[test]
    fn verify_catches_a_swapped_recv() {
        let o = opts(Schedule::OneFOneB, 3, 4, 1);
        let mut p = plan(&o).unwrap();
        // Swap the microbatches of stage 1's first two activation recvs.
        let idx: Vec<usize> = p[1]
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s, Step::Comm { recv_prev: Some(_), .. }))
            .map(|(i, _)| i)
            .take(2)
            .collect();
        let get = |s: &Step| match s {
            Step::Comm { recv_prev: Some(t), .. } => *t,
            _ => unreachable!(),
        };
        let (a, b) = (get(&p[1][idx[0]]), get(&p[1][idx[1]]));
        for (i, t) in [(idx[0], b), (idx[1], a)] {
            if let Step::Comm { recv_prev, .. } = &mut p[1][i] {
                *recv_prev = Some(t);
            }
        }
        assert!(verify(&o, &p).is_err());
    }

    /// 1F1B warm-up lengths are Megatron's: stages - stage - 1 forward passes before the first backward pass.
    #[test]
    fn one_f_one_b_warmup_lengths() {
        let o = opts(Schedule::OneFOneB, 4, 8, 1);
        let p = plan(&o).unwrap();
        for (st, steps) in p.iter().enumerate() {
            let before = steps.iter().take_while(|s| !matches!(s, Step::Backward { .. })).filter(|s| matches!(s, Step::Forward { .. })).count();
            assert_eq!(before, 4 - st, "stage {st}: warm-up {} + the first steady forward", 4 - st - 1);
        }
    }

    #[test]
    fn invalid_options_are_refused() {
        assert!(validate(&opts(Schedule::OneFOneB, 1, 4, 1)).is_err());
        assert!(validate(&opts(Schedule::OneFOneB, 2, 0, 1)).is_err());
        assert!(validate(&opts(Schedule::OneFOneB, 2, 4, 2)).is_err());
        assert!(validate(&opts(Schedule::Interleaved, 2, 4, 2)).is_err());
        assert!(validate(&opts(Schedule::Interleaved, 3, 4, 2)).is_err());
        assert!(validate(&opts(Schedule::Interleaved, 3, 6, 2)).is_ok());
        let bug = PipelineOptions { variant: Variant::Bug, ..opts(Schedule::Gpipe, 2, 2, 1) };
        assert!(validate(&bug).is_err());
    }
}
