//! `cuorder completions SHELL`: prints a shell completion script for the whole command line.

use std::process::ExitCode;

use cuorder::cli::say;

use crate::{Cli, CompletionsArgs};

/// Runs `cuorder completions`.
pub fn run(a: CompletionsArgs) -> ExitCode {
    let mut buf = Vec::new();
    clap_complete::generate(a.shell, &mut <Cli as clap::CommandFactory>::command(), "cuorder", &mut buf);
    say(&String::from_utf8_lossy(&buf));
    ExitCode::SUCCESS
}
