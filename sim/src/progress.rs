//! Progress of a long search, shared between the search and whoever watches it (the command line's progress bar,
//! its Ctrl-C handler): counters the search updates as it goes and a stop flag it checks. No UI lives here; the
//! counters never influence what the search does, only the stop flag does (it ends the search like a time limit).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Counters of a running search and its stop flag. Share it with `Arc` between the search
/// ([`crate::explore::Limits::progress`], [`crate::strategy::SampleOptions::progress`]) and a watcher thread.
#[derive(Debug, Default)]
pub struct Progress {
    /// States visited so far (exhaustive and bounded searches, over all bounds), a count.
    states: AtomicU64,
    /// Executions finished so far (sampling strategies), a count.
    executions: AtomicU64,
    /// Model steps taken so far by finished executions (sampling strategies), a count.
    steps: AtomicU64,
    /// The preemption bound being searched (bounded search).
    bound: AtomicU64,
    /// Units of work done by a command's own loop (traces checked, candidates tried, programs written), a count.
    items: AtomicU64,
    /// Set by [`Progress::request_stop`].
    stop: AtomicBool,
}

/// What a search reports when its stop flag was set (the command line sets it on Ctrl-C); it is named in the
/// search's `limit_hit` like the time limit.
pub const INTERRUPTED: &str = "interrupted by Ctrl-C";

impl Progress {
    /// A fresh watch: every counter 0, no stop requested.
    pub fn new() -> Progress {
        Progress::default()
    }

    /// Asks the search to stop at its next check (after the state or execution in hand); it then reports what it
    /// found so far with the limit [`INTERRUPTED`]. Returns whether a stop had already been requested.
    pub fn request_stop(&self) -> bool {
        self.stop.swap(true, Ordering::SeqCst)
    }

    /// Whether [`Progress::request_stop`] was called.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// States visited so far (exhaustive and bounded searches).
    pub fn states(&self) -> u64 {
        self.states.load(Ordering::Relaxed)
    }

    /// Executions finished so far (sampling strategies).
    pub fn executions(&self) -> u64 {
        self.executions.load(Ordering::Relaxed)
    }

    /// Model steps of the executions finished so far (sampling strategies), or of the single run in progress
    /// (`cuorder run`, `cuorder time`; updated every few hundred steps).
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::Relaxed)
    }

    /// The preemption bound being searched (bounded search; 0 otherwise).
    pub fn bound(&self) -> u64 {
        self.bound.load(Ordering::Relaxed)
    }

    /// Work items done so far by a command's own loop ([`Progress::add_item`]).
    pub fn items(&self) -> u64 {
        self.items.load(Ordering::Relaxed)
    }

    /// Counts one more work item done (a trace checked, a shrink candidate tried, a program written).
    pub fn add_item(&self) {
        self.items.fetch_add(1, Ordering::Relaxed);
    }

    /// Sets the steps taken so far by a single run (`cuorder run`, `cuorder time`).
    pub(crate) fn set_steps(&self, n: u64) {
        self.steps.store(n, Ordering::Relaxed);
    }

    pub(crate) fn set_states(&self, n: u64) {
        self.states.store(n, Ordering::Relaxed);
    }

    pub(crate) fn set_bound(&self, k: u64) {
        self.bound.store(k, Ordering::Relaxed);
    }

    pub(crate) fn add_execution(&self, steps: u64) {
        self.executions.fetch_add(1, Ordering::Relaxed);
        self.steps.fetch_add(steps, Ordering::Relaxed);
    }
}

/// Whether `p` asks the search to stop.
pub(crate) fn stopped(p: &Option<std::sync::Arc<Progress>>) -> bool {
    p.as_ref().is_some_and(|p| p.stop_requested())
}
