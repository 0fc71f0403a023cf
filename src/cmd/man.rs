//! `cuorder man`: prints the man page (roff) of the whole command line.

use std::process::ExitCode;

use cuorder::cli::{bad_input, say};

use crate::Cli;

/// Runs `cuorder man`.
pub fn run() -> ExitCode {
    let mut buf = Vec::new();
    if let Err(e) = clap_mangen::Man::new(<Cli as clap::CommandFactory>::command()).render(&mut buf) {
        return bad_input(&format!("cannot render the man page: {e}"));
    }
    say(&String::from_utf8_lossy(&buf));
    ExitCode::SUCCESS
}
