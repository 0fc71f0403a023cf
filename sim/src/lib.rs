//! cuorder's simulator: schedulers over the model's enabled steps, the exhaustive explorer and its preemption-bounded
//! variant, sampling strategies (random walk, PCT), single seeded runs, replay of a recorded schedule, traces, and the
//! progress counters and stop flag a watcher shares with a search. Output is a pure function of (program, profile, seed
//! or schedule).

pub mod conform;
pub mod cost;
pub mod budget;
pub mod cover;
pub mod differential;
pub mod dpor;
pub mod explore;
pub mod gen;
pub mod pipeline;
pub mod progress;
pub mod reference;
pub mod rng;
pub mod run;
pub mod scheduler;
pub mod strategy;
pub mod timed;
