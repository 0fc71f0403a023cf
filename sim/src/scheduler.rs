//! The `Scheduler` seam: an oracle that picks one of the steps the model says are enabled. Exploration never
//! branches on which strategy is used (loom/shuttle's design).

use cuorder_model::semantics::incremental::Frontier;
use cuorder_model::semantics::State;

use crate::rng::Rng;

/// Picks the next step of a single execution.
pub trait Scheduler {
    /// Returns an index into `enabled` (below `enabled.len()`, never empty), in [`Frontier`]'s order: rank by rank.
    fn pick(&mut self, state: &State, enabled: &Frontier) -> usize;
    /// One line describing the strategy and its knobs, printed with every run.
    fn describe(&self) -> String;
}

/// Uniformly random among the enabled steps, from a seed.
pub struct RandomScheduler {
    rng: Rng,
    seed: u64,
}

impl RandomScheduler {
    /// A scheduler whose every choice derives from `seed`.
    pub fn new(seed: u64) -> RandomScheduler {
        RandomScheduler { rng: Rng::new(seed), seed }
    }
}

impl Scheduler for RandomScheduler {
    fn pick(&mut self, _state: &State, enabled: &Frontier) -> usize {
        self.rng.below(enabled.len() as u64) as usize
    }
    fn describe(&self) -> String {
        format!("random, seed {}", self.seed)
    }
}

/// Always the first enabled step (a fixed, readable schedule).
pub struct FirstScheduler;

impl Scheduler for FirstScheduler {
    fn pick(&mut self, _state: &State, _enabled: &Frontier) -> usize {
        0
    }
    fn describe(&self) -> String {
        "first enabled step".into()
    }
}
