//! Rule N14 (a large group is cut into kernel plans): the plan cutting against NCCL's schedule and the hardware
//! measurement in traces/hw/plan-split-2026-12-02, and the verdicts it changes.

use std::path::Path;

use cuorder_model::profile::{PlanBudget, PlanOrderChoice};
use cuorder_model::semantics::{cut_plans, p2p_schedule_deltas, P2pCall};

/// NCCL's p2p schedule offsets (init.cc: triangular numbers modulo the next power of two, those below n); the
/// 16-rank sequence as NCCL's source comment lists it.
#[test]
fn schedule_offsets_are_nccls_quadratic_sequence() {
    assert_eq!(p2p_schedule_deltas(16), vec![0, 1, 3, 6, 10, 15, 5, 12, 4, 13, 7, 2, 14, 11, 9, 8]);
    assert_eq!(p2p_schedule_deltas(3), vec![0, 1, 2]);
    for n in 1..=130 {
        let mut d = p2p_schedule_deltas(n);
        assert_eq!(d[0], 0);
        d.sort();
        assert_eq!(d, (0..n).collect::<Vec<_>>(), "n = {n}: every offset exactly once");
    }
}

/// Self pairs on a one-rank communicator, as the hardware run made them.
fn self_pairs(n: usize, bytes: u64) -> Vec<P2pCall> {
    (0..n).flat_map(|_| [P2pCall { send: true, peer: 0, bytes }, P2pCall { send: false, peer: 0, bytes }]).collect()
}

fn plans_for(budget: &PlanBudget, n: usize, bytes: u64) -> u32 {
    let count = |order| cut_plans(budget, order, 1, 0, &self_pairs(n, bytes)).into_iter().max().map_or(0, |p| p + 1);
    // One round on a one-rank communicator: the two orders cut alike (so the measurement cannot tell them apart).
    assert_eq!(count(PlanOrderChoice::Restart), count(PlanOrderChoice::Continue));
    count(PlanOrderChoice::Continue)
}

fn number(line: &str, key: &str) -> u64 {
    let at = line.find(&format!("\"{key}\": ")).unwrap_or_else(|| panic!("no {key} in {line}")) + key.len() + 4;
    line[at..].chars().take_while(|c| c.is_ascii_digit()).collect::<String>().parse().unwrap()
}

/// Every group the hardware run measured takes as many plans in the model as NCCL 2.28.9 launched kernels.
#[test]
fn the_h200_budget_reproduces_every_measured_plan_count() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("traces/hw/plan-split-2026-12-02");
    let b = PlanBudget::H200_NCCL_2_28;
    let mut checked = 0;
    for line in std::fs::read_to_string(dir.join("coarse.jsonl")).unwrap().lines().filter(|l| l.contains("\"pairs\"")) {
        let (n, bytes, k) = (number(line, "pairs"), number(line, "bytes"), number(line, "kernel_nodes"));
        assert_eq!(plans_for(&b, n as usize, bytes) as u64, k, "{line}");
        checked += 1;
    }
    for line in std::fs::read_to_string(dir.join("plan-split.jsonl")).unwrap().lines().filter(|l| l.contains("first_pairs")) {
        let bytes = number(line, "bytes");
        let max = number(line, "max_pairs") as usize;
        let steps: Vec<(usize, u32)> = line[line.find("[[").unwrap() + 1..line.rfind("]]").unwrap() + 1]
            .split("], [")
            .map(|p| {
                let v: Vec<u64> = p.trim_matches(|c| c == '[' || c == ']').split(", ").map(|x| x.parse().unwrap()).collect();
                (v[0] as usize, v[1] as u32)
            })
            .collect();
        for n in 1..=max {
            let expect = steps.iter().rev().find(|(first, _)| *first <= n).unwrap().1;
            assert_eq!(plans_for(&b, n, bytes), expect, "{n} pairs of {bytes} bytes");
            checked += 1;
        }
        assert_eq!(b.pairs_per_plan(bytes) as usize + 1, steps.get(1).map_or(max + 1, |s| s.0), "{bytes} bytes");
    }
    assert!(checked > 4000, "{checked}");
}

/// Pairing follows the schedule, not call order: a send to rank me+1 and a recv from me-1 share a round, so a ring
/// exchange of 12 × 1 MiB (one plan holds 12 such pairs) stays one plan however the calls are ordered.
#[test]
fn a_ring_exchange_pairs_sends_with_recvs() {
    let b = PlanBudget::H200_NCCL_2_28;
    let mut calls: Vec<P2pCall> = (0..12).map(|_| P2pCall { send: true, peer: 3, bytes: 1 << 20 }).collect();
    calls.extend((0..12).map(|_| P2pCall { send: false, peer: 1, bytes: 1 << 20 }));
    for order in [PlanOrderChoice::Continue, PlanOrderChoice::Restart] {
        assert_eq!(cut_plans(&b, order, 8, 2, &calls), vec![0; 24]);
    }
    // 13 pairs: the 13th send and recv start the second plan together.
    calls.insert(12, P2pCall { send: true, peer: 3, bytes: 1 << 20 });
    calls.push(P2pCall { send: false, peer: 1, bytes: 1 << 20 });
    let plans = cut_plans(&b, PlanOrderChoice::Continue, 8, 2, &calls);
    assert_eq!((plans[12], plans[25]), (1, 1));
    assert_eq!(plans.iter().filter(|p| **p == 0).count(), 24);
}

/// Epochs before rounds: each epoch takes one call per peer queue, so a peer with many calls spreads over plans
/// while the calls to the other peers of its rounds go early.
#[test]
fn each_epoch_takes_one_call_per_peer() {
    let b = PlanBudget::H200_NCCL_2_28; // 3 pairs of 16 MiB per plan
    let big = 16 << 20;
    // On 4 ranks, rank 0 sends 4 messages to rank 1 (round 1) and 1 to rank 3 (offset 3: round 2).
    let mut calls: Vec<P2pCall> = (0..4).map(|_| P2pCall { send: true, peer: 1, bytes: big }).collect();
    calls.push(P2pCall { send: true, peer: 3, bytes: big });
    // Pairs: epoch 0: to 1, to 3; epoch 1: to 1; [plan 1] epoch 2: to 1; epoch 3: to 1.
    assert_eq!(cut_plans(&b, PlanOrderChoice::Continue, 4, 0, &calls), vec![0, 0, 1, 1, 0]);
}

/// NCCL's `scheduleP2pTasksToPlan`, transliterated: per peer a send queue and a recv queue in call order; each plan
/// walks the rounds of `comm->p2pSchedule` (send to `me + delta`, recv from `me - delta`), taking the two queue heads
/// of a round as a pair while `ncclTestBudget(plan->nWorkBatches + nChannelsMax)` passes, epoch after epoch. NCCL
/// 2.22-2.29.3 starts each plan at round 0 (`for (int round=0; ...)`); 2.29.7 and later carry the round over
/// (`for (; *p2pRound < nRanks; (*p2pRound)++)`).
fn nccl_plans(b: &PlanBudget, restart: bool, n: usize, me: usize, calls: &[P2pCall]) -> Vec<u32> {
    use std::collections::VecDeque;
    let (mut sendq, mut recvq) = (vec![VecDeque::new(); n], vec![VecDeque::new(); n]);
    for (i, c) in calls.iter().enumerate() {
        if c.send { sendq[c.peer].push_back(i) } else { recvq[c.peer].push_back(i) }
    }
    let schedule: Vec<(usize, usize)> = p2p_schedule_deltas(n).iter().map(|d| ((me + d) % n, (me + n - d) % n)).collect();
    let (mut plans, mut left, mut plan, mut round) = (vec![0u32; calls.len()], calls.len(), 0u32, 0usize);
    while left > 0 {
        let mut batches = 0u32; // plan->nWorkBatches
        if restart {
            round = 0;
        }
        'plan: while left > 0 {
            while round < n {
                let (to, from) = schedule[round];
                let (s, r) = (sendq[to].front().copied(), recvq[from].front().copied());
                if s.is_none() && r.is_none() {
                    round += 1;
                    continue;
                }
                if batches + b.channels_per_peer > b.batches {
                    break 'plan;
                }
                let bytes = [s, r].iter().flatten().map(|&i| calls[i].bytes).max().unwrap();
                batches += b.pair_cost(bytes);
                for (q, i) in [(&mut sendq[to], s), (&mut recvq[from], r)] {
                    if let Some(i) = i {
                        q.pop_front();
                        plans[i] = plan;
                        left -= 1;
                    }
                }
                round += 1;
            }
            round = 0;
        }
        plan += 1;
    }
    plans
}

/// Issue 30: the model filled plans epoch by epoch, round by round across cuts (NCCL >= 2.29.7), while NCCL 2.28
/// restarts each plan at round 0. On 3 ranks, r0 sends four 16 MiB messages to r1 (round 1) and three to r2
/// (round 2), three pairs a plan: the second plan holds the fourth send to r1 (restart) or the third to r2 (continue).
#[test]
fn the_plan_after_a_cut_restarts_at_round_zero_before_nccl_2_29_7() {
    let b = PlanBudget::H200_NCCL_2_28;
    let big = 16 << 20;
    let mut calls: Vec<P2pCall> = (0..4).map(|_| P2pCall { send: true, peer: 1, bytes: big }).collect();
    calls.extend((0..3).map(|_| P2pCall { send: true, peer: 2, bytes: big }));
    assert_eq!(cut_plans(&b, PlanOrderChoice::Continue, 3, 0, &calls), vec![0, 0, 1, 2, 0, 1, 1]);
    assert_eq!(cut_plans(&b, PlanOrderChoice::Restart, 3, 0, &calls), vec![0, 0, 1, 1, 0, 1, 2]);
}

/// `cut_plans` in either order equals the transliterated NCCL loops on random groups (peers, sizes, budgets).
#[test]
fn cut_plans_follows_both_nccl_loops() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let mut differed = 0;
    for _ in 0..3000 {
        let n = 2 + next(7) as usize;
        let me = next(n as u64) as usize;
        let cpp = 1 + next(64) as u32;
        let b = PlanBudget { batches: cpp + next(200) as u32, channels_per_peer: cpp, chunk_bytes: 1 << (10 + next(8)) };
        let calls: Vec<P2pCall> = (0..next(40))
            .map(|_| {
                let peer = (me + 1 + next(n as u64 - 1) as usize) % n;
                P2pCall { send: next(2) == 0, peer, bytes: 1 + next(1 << 22) }
            })
            .collect();
        let (restart, cont) = (cut_plans(&b, PlanOrderChoice::Restart, n, me, &calls), cut_plans(&b, PlanOrderChoice::Continue, n, me, &calls));
        assert_eq!(restart, nccl_plans(&b, true, n, me, &calls), "restart: n {n} me {me} {b:?} {calls:?}");
        assert_eq!(cont, nccl_plans(&b, false, n, me, &calls), "continue: n {n} me {me} {b:?} {calls:?}");
        differed += usize::from(restart != cont);
    }
    assert!(differed > 100, "{differed}");
}
