//! Verdicts: the problems an execution can show (deadlock, data race, undefined behaviour), each with its witness
//! schedule, and whether it happens in every execution or only in some (DESIGN.md "Verdicts").

use serde::{Deserialize, Serialize};

use crate::program::BufRef;
use crate::rule::Rule;
use crate::semantics::{OpLoc, Race, StaleRead, Step, Stuck, Timeout, Undefined};

/// One problem found by exploration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Problem {
    /// No step can be taken and some host thread or item has not finished; or, with `starvation`, the device can
    /// refuse to start the item that everything waits for (S1).
    Deadlock(Stuck),
    /// Two conflicting accesses that happens-before does not order.
    DataRace(Race),
    /// A broken rule of the platform: the program's behaviour is undefined.
    Undefined(Undefined),
    /// A value assertion (`Expect`) whose read does not see its writer's value (V1).
    StaleRead(StaleRead),
    /// A hang that a host watchdog turned into an abort after its timeout (N9): the wait-for graph when it fired
    /// and the communicators it aborted.
    Timeout(Timeout),
}

/// How often a problem shows up among the executions explored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Frequency {
    /// In every execution of the program under the profile.
    Always,
    /// In some executions, not all.
    Sometimes,
}

/// A problem with the schedule that produces it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub problem: Problem,
    pub frequency: Frequency,
    /// The witness: the steps, from the initial state, of one execution that shows the problem.
    pub witness: Vec<Step>,
    /// N7: the platform choice every execution that showed the problem made, when the profile leaves the choice to
    /// the platform and only one of its choices showed it (collectives connecting at init, or lazily; for a
    /// complete search: the problem needs that choice). `None`: the problem showed with either choice, or before
    /// any choice was made, or the profile fixes the choice. Absent in artifacts saved before it existed.
    #[serde(default)]
    pub platform: Option<crate::profile::ConnectChoice>,
    /// N14: likewise for the order in which cut groups fill their kernel plans (NCCL 2.22-2.29.3's or NCCL
    /// >= 2.29.7's, profile `p2p_plan_order: Either`). Absent in artifacts saved before it existed.
    #[serde(default)]
    pub plan_order: Option<crate::profile::PlanOrderChoice>,
}

/// The platform choices the executions that showed a problem made, as a bit set: bits 0-1 for when collectives
/// connect (N7, [`crate::profile::ConnectChoice`]: 1 lazily, 2 at init), bits 2-3 for the kernel-plan order (N14,
/// [`crate::profile::PlanOrderChoice`]: 4 NCCL >= 2.29.7's, 8 NCCL 2.22-2.29.3's); an execution that made no choice
/// sets both bits of that choice.
pub type PlatformSeen = u8;

/// The [`PlatformSeen`] of an execution that made no platform choice.
pub const PLATFORM_ANY: PlatformSeen = 15;

/// The [`PlatformSeen`] bits of a state: the platform's choices recorded in it, each both ways when not made.
pub fn platform_bits(connect: Option<crate::profile::ConnectChoice>, plan: Option<crate::profile::PlanOrderChoice>) -> PlatformSeen {
    use crate::profile::{ConnectChoice, PlanOrderChoice};
    let c = match connect {
        Some(ConnectChoice::Lazy) => 1,
        Some(ConnectChoice::Init) => 2,
        None => 3,
    };
    let p = match plan {
        Some(PlanOrderChoice::Continue) => 4,
        Some(PlanOrderChoice::Restart) => 8,
        None => 12,
    };
    c | p
}

/// The connection choice (N7) a problem seen under `bits` needs: `Some` when only one choice showed it.
pub fn platform_needed(bits: PlatformSeen) -> Option<crate::profile::ConnectChoice> {
    match bits & 3 {
        1 => Some(crate::profile::ConnectChoice::Lazy),
        2 => Some(crate::profile::ConnectChoice::Init),
        _ => None,
    }
}

/// The kernel-plan order (N14) a problem seen under `bits` needs: `Some` when only one order showed it.
pub fn plan_order_needed(bits: PlatformSeen) -> Option<crate::profile::PlanOrderChoice> {
    match bits & 12 {
        4 => Some(crate::profile::PlanOrderChoice::Continue),
        8 => Some(crate::profile::PlanOrderChoice::Restart),
        _ => None,
    }
}

/// A key that identifies "the same problem" across executions.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ProblemKey {
    /// Deadlock: where every unfinished thread is (thread, pc) and whether it is the S1 kind.
    Deadlock(Vec<(u32, u32)>, bool),
    DataRace(OpLoc, OpLoc, BufRef, BufRef),
    Undefined(Rule, Vec<OpLoc>),
    /// The failed value assertion.
    StaleRead(OpLoc),
    /// The key artifacts saved before 2026-12 carry for a watchdog firing: its rank and where every unfinished
    /// thread was (thread, pc). It made one hang as many findings as there were ranks whose watchdog could fire
    /// first; [`ProblemKey::matches`] reads it as the [`ProblemKey::Hang`] of the same positions.
    Timeout(u32, Vec<(u32, u32)>),
    /// A hang that a watchdog turned into an abort (N9): where every unfinished thread was (thread, pc) when the
    /// watchdog fired, whichever rank's it was, as a deadlock is keyed by where the threads are stuck.
    Hang(Vec<(u32, u32)>),
}

impl ProblemKey {
    /// Whether `self` (a key found now) is the problem `saved` names, a key from an artifact: equal keys, or a
    /// saved [`ProblemKey::Timeout`] and the [`ProblemKey::Hang`] of the same positions.
    pub fn matches(&self, saved: &ProblemKey) -> bool {
        match (self, saved) {
            (ProblemKey::Hang(at), ProblemKey::Timeout(_, old)) => at == old,
            _ => self == saved,
        }
    }
}

impl Problem {
    /// Short name: "deadlock", "data race", "undefined", "stale read", "timeout".
    pub fn kind_name(&self) -> &'static str {
        match self {
            Problem::Deadlock(_) => "deadlock",
            Problem::DataRace(_) => "data race",
            Problem::Undefined(_) => "undefined",
            Problem::StaleRead(_) => "stale read",
            Problem::Timeout(_) => "timeout",
        }
    }
}
