//! The `cuorder` library behind the command-line program: loading programs and profiles, `check` reports,
//! timelines, and diagnostics rendering. The binary (`main.rs`) only parses arguments and prints.

pub mod artifact;
pub mod diagnostics;
pub mod report;
pub mod timeline;
pub mod traces;

use std::path::Path;

use cuorder_model::profile::Profile;
use cuorder_model::program::Program;

/// Why a program or profile could not be loaded; `rendered` is ready to print (with source snippets).
#[derive(Debug)]
pub struct LoadError {
    pub rendered: String,
}

/// Reads and validates a program file. The program's name is the file stem.
///
/// Errors: the file cannot be read, or it has syntax or validation errors (all of them, rendered with file, line,
/// column and a snippet).
pub fn load_program(path: &Path, color: bool) -> Result<(Program, String), LoadError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LoadError { rendered: format!("error: cannot read {}: {e}\n", path.display()) })?;
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("program");
    match cuorder_model::format::load(name, &text) {
        Ok(p) => Ok((p, text)),
        Err(diags) => {
            // A resolved program (as `cuorder gen` and `cuorder-hw smoke-programs` write) is accepted too.
            if text.trim_start().starts_with("(") || text.contains("ranks: [") {
                if let Ok(p) = ron::from_str::<Program>(&text) {
                    return Ok((p, text));
                }
            }
            Err(LoadError { rendered: diagnostics::render(&path.display().to_string(), &text, &diags, color) })
        }
    }
}

/// A profile by built-in name (`portable`, `eager`) or from a RON file.
///
/// Errors: neither a built-in name nor a readable, valid profile file.
pub fn load_profile(spec: &str) -> Result<Profile, LoadError> {
    if let Some(p) = Profile::builtin(spec) {
        return Ok(p);
    }
    let path = Path::new(spec);
    if !path.exists() {
        return Err(LoadError {
            rendered: format!(
                "error: unknown profile `{spec}`: not a built-in profile ({}) and no such file\n",
                Profile::BUILTIN.join(", ")
            ),
        });
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| LoadError { rendered: format!("error: cannot read {}: {e}\n", path.display()) })?;
    Profile::from_ron(&text).map_err(|e| LoadError {
        rendered: format!("error: {}:{}:{}: {}\n", path.display(), e.position.line, e.position.col, e.code),
    })
}

/// Reads a hardware observation (as `cuorder-hw run` writes it).
///
/// Errors: unreadable file, not an observation, or another format version.
pub fn load_observation(path: &Path) -> Result<cuorder_model::observation::Observation, LoadError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| LoadError { rendered: format!("error: cannot read {}: {e}\n", path.display()) })?;
    cuorder_model::observation::Observation::from_ron(&text)
        .map_err(|e| LoadError { rendered: format!("error: {}: {e}\n", path.display()) })
}
