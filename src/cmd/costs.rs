//! `cuorder costs [NAME]`: lists the built-in cost models of `cuorder time`, or prints one as RON.

use std::process::ExitCode;

use cuorder::cli::{bad_input, say};
use cuorder_sim::cost::CostModel;

use crate::CostsArgs;

/// Runs `cuorder costs`.
pub fn run(a: CostsArgs) -> ExitCode {
    let Some(n) = a.name else {
        for n in CostModel::BUILTIN {
            if let Some(m) = CostModel::builtin(n) {
                say(&format!("{n}: {}\n", m.source));
            }
        }
        return ExitCode::SUCCESS;
    };
    match cuorder::timing::load_costs(&n) {
        Ok(mut m) => {
            // Printed as the file has it: reports name the file beside the model, but a copy written back must not
            // gain "(file)" at every round trip.
            if let Some(own) = m.name.strip_suffix(&format!(" ({n})")) {
                m.name = own.to_string();
            }
            say(&format!("{}\n", ron::ser::to_string_pretty(&m, ron::ser::PrettyConfig::default()).unwrap_or_default()));
            ExitCode::SUCCESS
        }
        Err(e) => bad_input(&e),
    }
}
