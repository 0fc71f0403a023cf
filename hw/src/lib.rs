//! cuorder's hardware executor: runs a [`cuorder_model::program::Program`] on real GPUs (one rank process per GPU,
//! spawned by a supervisor with a watchdog) and records an [`observation::Observation`].

#[allow(dead_code)]
pub(crate) mod cuda;
pub mod batch;
pub mod calibrate;
pub mod error;
pub mod kernels;
pub mod libsearch;
pub mod lower;
pub mod observation;
pub mod pack;
pub mod protocol;
pub mod rank;
pub mod smoke;
pub mod supervisor;
