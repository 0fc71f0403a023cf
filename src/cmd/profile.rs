//! `cuorder profile [NAME]`: lists the built-in profiles, or says what one assumes in plain words, then its RON.

use std::process::ExitCode;

use cuorder::cli::{fail, say};
use cuorder_model::profile::Profile;

use crate::ProfileArgs;

/// Runs `cuorder profile`.
pub fn run(a: ProfileArgs) -> ExitCode {
    let Some(n) = a.name else {
        for n in Profile::BUILTIN {
            let p = Profile::builtin(n).unwrap();
            say(&format!("{n}: {}\n", p.description));
        }
        return ExitCode::SUCCESS;
    };
    match cuorder::load_profile(&n) {
        Ok(p) => {
            // The plain words are RON comments, so the output loads as a profile file as it is (a start for your
            // own: `cuorder profile eager > mine.ron`); it failed at 1:8 with the words as plain text.
            say(&format!("// profile {}: {}\n", if p.name.is_empty() { &n } else { &p.name }, p.description));
            say("// assumes:\n");
            for a in p.assumptions() {
                say(&format!("//   - {a}\n"));
            }
            say("\n");
            say(&format!("{}\n", ron::ser::to_string_pretty(&p, ron::ser::PrettyConfig::default()).unwrap_or_default()));
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
