//! `cuorder explain [RULE]`: prints a rule of the model (docs/semantics.md), or lists every rule with its title.

use std::process::ExitCode;

use cuorder::cli::{bad_input, say};
use cuorder_model::rule::Rule;

use crate::ExplainArgs;

/// Runs `cuorder explain`.
pub fn run(a: ExplainArgs) -> ExitCode {
    let Some(id) = a.rule else {
        for r in Rule::ALL {
            let title = r.doc().and_then(|d| d.lines().next()).map(|l| l.trim_start_matches("## ")).unwrap_or(r.id());
            say(&format!("{title}\n"));
        }
        return ExitCode::SUCCESS;
    };
    match Rule::from_id(&id).and_then(|r| r.doc()) {
        Some(doc) => {
            say(&format!("{doc}\n"));
            ExitCode::SUCCESS
        }
        None => {
            let ids: Vec<&str> = Rule::ALL.iter().map(|r| r.id()).collect();
            bad_input(&format!("no rule {id:?}; the rules are {}", ids.join(", ")))
        }
    }
}
