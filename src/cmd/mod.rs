//! One module per `cuorder` command, each a `run` from its parsed arguments to the exit status; what several
//! commands share (output, exit codes, loading, budgets) is in the library's `cuorder::cli`.

pub mod check;
pub mod completions;
pub mod conform;
pub mod costs;
pub mod explain;
pub mod explore;
pub mod gen;
pub mod man;
pub mod profile;
pub mod replay;
pub mod run;
pub mod shrink;
pub mod time;

/// The global flags, decided once for every command.
pub struct Ctx {
    /// Color diagnostics on stderr (`--color`).
    pub color: bool,
    /// Draw the progress bar of a search on stderr (`--progress`).
    pub progress: bool,
}
