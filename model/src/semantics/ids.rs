//! The interleaving-independent names of the model (ARCHITECTURE.md "Identity"): a host thread by its global index,
//! an op by (thread, index), an item by the op that issued it, a memory block by its buffer and generation. Two
//! schedules that differ only in the order of independent steps therefore reach equal states.

use serde::{Deserialize, Serialize};

use crate::program::BufRef;

/// Global index of a host thread (ranks' threads numbered in rank order).
pub type ThreadId = u32;

/// The op at index `op` of global thread `thread`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpLoc {
    pub thread: ThreadId,
    pub op: u32,
}

/// Names an item by the op that issued it; `sub` tells apart the launches of one `GroupEnd` (one per communicator
/// and acting rank, N4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ItemKey {
    pub thread: ThreadId,
    pub op: u32,
    pub sub: u16,
}

impl ItemKey {
    /// The item issued by the op at `loc` (`sub` 0 unless a group end launches several).
    pub fn of(loc: OpLoc, sub: u16) -> ItemKey {
        ItemKey { thread: loc.thread, op: loc.op, sub }
    }

    /// The op that issued the item.
    pub fn loc(self) -> OpLoc {
        OpLoc { thread: self.thread, op: self.op }
    }
}

/// A block of memory: the static buffer that owns it (generation 0), or the pooled buffer whose `generation`-th
/// allocation created it (P4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct BlockId {
    pub buf: BufRef,
    pub generation: u32,
}
