//! cuorder's semantic model: the program (`program`), its surface format and validation (`format`), the profile of
//! undocumented platform behaviour (`profile`), the rules (`rule`, shipped as `docs/semantics.md`), what each
//! operation touches (`op_info`), the transition system (`semantics`) and verdicts (`verdict`).
//! Pure: no randomness, clock, IO, threads or GPU.

pub mod program;
pub mod format;
pub mod clock;
pub mod describe;
pub mod profile;
pub mod semantics;
pub mod op_info;
pub mod rule;
pub mod verdict;
pub mod build;
pub mod observation;
pub mod validate;
