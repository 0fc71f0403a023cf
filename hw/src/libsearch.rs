//! Finding the shared libraries cudarc loads at run time (NCCL, NVRTC) when they are not where the dynamic loader
//! looks: a variable naming the library, then cudarc's own names, then the usual folders, then Python's packages.
//!
//! cudarc opens fixed names (`libnccl.so`, `libnvrtc.so.13`, ...) with `dlopen`, and the loader reads
//! `LD_LIBRARY_PATH` only when a process starts; so a library found elsewhere is made reachable by a folder that is
//! prepended to `LD_LIBRARY_PATH` of a new process (the re-executed supervisor and its rank processes), holding a
//! symbolic link with one of cudarc's names when the file has another name (NCCL ships as `libnccl.so.2`).
//! [`search`] is pure (its inputs are passed in) so that the order of attempts is unit-tested.

use std::path::{Path, PathBuf};

/// A library the executor needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lib {
    Nccl,
    Nvrtc,
}

impl Lib {
    /// The stem cudarc uses (`nccl`, `nvrtc`).
    pub fn stem(self) -> &'static str {
        match self {
            Lib::Nccl => "nccl",
            Lib::Nvrtc => "nvrtc",
        }
    }

    /// The variable that names the library file (or its folder) explicitly.
    pub fn env_var(self) -> &'static str {
        match self {
            Lib::Nccl => "CUORDER_NCCL_LIB",
            Lib::Nvrtc => "CUORDER_NVRTC_LIB",
        }
    }

    /// File names to look for in a folder, best first.
    pub fn file_names(self) -> &'static [&'static str] {
        match self {
            Lib::Nccl => &["libnccl.so", "libnccl.so.2"],
            Lib::Nvrtc => &["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"],
        }
    }

    /// Python modules whose folder may hold the library in `lib/` (pip wheels of NVIDIA's libraries).
    pub fn python_modules(self) -> &'static [&'static str] {
        match self {
            Lib::Nccl => &["nvidia.nccl", "nvidia.cu13", "nvidia.cu12"],
            Lib::Nvrtc => &["nvidia.cuda_nvrtc", "nvidia.cu13", "nvidia.cu12"],
        }
    }

    /// The names cudarc tries with `dlopen`.
    pub fn cudarc_names(self) -> Vec<String> {
        let mut names = cudarc::get_lib_name_candidates(self.stem());
        let mut seen = std::collections::BTreeSet::new();
        names.retain(|n| seen.insert(n.clone()));
        names
    }
}

/// Folders searched after cudarc's names fail, after those of `LD_LIBRARY_PATH`.
pub const USUAL_DIRS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/lib",
    "/usr/local/cuda/lib64",
    "/usr/local/cuda/targets/x86_64-linux/lib",
    "/usr/local/nccl/lib",
    "/opt/nccl/lib",
];

/// What [`search`] reads from the world.
pub struct SearchInputs<'a> {
    /// The value of [`Lib::env_var`], if set.
    pub env_override: Option<String>,
    /// `LD_LIBRARY_PATH`, if set.
    pub ld_library_path: Option<String>,
    /// Extra folders from `CONDA_PREFIX`, `CUDA_HOME`, `NCCL_HOME` (their `lib`/`lib64`).
    pub extra_dirs: Vec<PathBuf>,
    /// Whether `dlopen` of this name or path succeeds.
    pub loadable: &'a dyn Fn(&str) -> bool,
    /// Whether this file exists.
    pub exists: &'a dyn Fn(&Path) -> bool,
    /// The folders Python reports for [`Lib::python_modules`] (each module's folder joined with `lib`), or why
    /// asking Python failed. Called only if everything before failed.
    pub python_dirs: &'a dyn Fn(&[&str]) -> Result<Vec<PathBuf>, String>,
}

/// Where a library was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// One of cudarc's names loads as things stand.
    AsIs { name: String },
    /// The library is this file; the process that uses it needs [`Found::ld_dirs`] on `LD_LIBRARY_PATH`, and
    /// `link` (a cudarc name) pointing at `file` in a folder of its own when `link` is `Some`.
    File { file: PathBuf, link: Option<String> },
}

/// The result of a search: what was found, and every attempt in order (for messages).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchReport {
    pub lib: Lib,
    pub found: Option<Found>,
    pub tried: Vec<String>,
}

impl SearchReport {
    /// A message saying that the library was not found and what was tried.
    pub fn not_found_message(&self) -> String {
        let mut m = format!(
            "could not find the {} library; tried, in order:\n",
            match self.lib {
                Lib::Nccl => "NCCL",
                Lib::Nvrtc => "NVRTC",
            }
        );
        for t in &self.tried {
            m.push_str("  - ");
            m.push_str(t);
            m.push('\n');
        }
        m.push_str(&format!("set {} to the library file to use", self.lib.env_var()));
        m
    }
}

fn file_found(lib: Lib, file: &Path) -> Found {
    let base = file.file_name().map(|b| b.to_string_lossy().into_owned()).unwrap_or_default();
    let names = lib.cudarc_names();
    let link = if names.contains(&base) { None } else { Some(names[0].clone()) };
    Found::File { file: file.to_path_buf(), link }
}

/// Searches for `lib`: [`Lib::env_var`] (a file or a folder), cudarc's names through the loader, the folders of
/// `LD_LIBRARY_PATH`, [`USUAL_DIRS`] and `extra_dirs`, then Python's packages. Pure apart from the callbacks.
pub fn search(lib: Lib, inp: &SearchInputs) -> SearchReport {
    let mut tried = Vec::new();
    let try_dir = |dir: &Path, tried: &mut Vec<String>| -> Option<Found> {
        for name in lib.file_names() {
            let f = dir.join(name);
            if (inp.exists)(&f) {
                if (inp.loadable)(&f.to_string_lossy()) {
                    return Some(file_found(lib, &f));
                }
                tried.push(format!("{}: exists but dlopen failed", f.display()));
                return None;
            }
        }
        tried.push(format!("{}: none of {}", dir.display(), lib.file_names().join(", ")));
        None
    };

    if let Some(v) = inp.env_override.as_deref().filter(|v| !v.is_empty()) {
        let p = Path::new(v);
        if (inp.exists)(&p.join(lib.file_names()[0])) || lib.file_names().iter().any(|n| (inp.exists)(&p.join(n))) {
            if let Some(f) = try_dir(p, &mut tried) {
                return SearchReport { lib, found: Some(f), tried };
            }
        } else if (inp.exists)(p) {
            if (inp.loadable)(v) {
                return SearchReport { lib, found: Some(file_found(lib, p)), tried };
            }
            tried.push(format!("{}={v}: exists but dlopen failed", lib.env_var()));
        } else {
            tried.push(format!("{}={v}: no such file", lib.env_var()));
        }
    } else {
        tried.push(format!("{}: not set", lib.env_var()));
    }

    let names = lib.cudarc_names();
    for n in &names {
        if (inp.loadable)(n) {
            return SearchReport { lib, found: Some(Found::AsIs { name: n.clone() }), tried };
        }
    }
    tried.push(format!(
        "the dynamic loader (LD_LIBRARY_PATH={}, ld.so cache) for cudarc's names {}",
        inp.ld_library_path.as_deref().unwrap_or(""),
        names.join(", ")
    ));

    let mut dirs: Vec<PathBuf> = Vec::new();
    for d in inp.ld_library_path.as_deref().unwrap_or("").split(':').filter(|d| !d.is_empty()) {
        dirs.push(PathBuf::from(d));
    }
    dirs.extend(USUAL_DIRS.iter().map(PathBuf::from));
    dirs.extend(inp.extra_dirs.iter().cloned());
    let mut seen = std::collections::BTreeSet::new();
    for d in dirs {
        if !seen.insert(d.clone()) {
            continue;
        }
        if let Some(f) = try_dir(&d, &mut tried) {
            return SearchReport { lib, found: Some(f), tried };
        }
    }

    match (inp.python_dirs)(lib.python_modules()) {
        Err(e) => tried.push(format!("python3 (modules {}): {e}", lib.python_modules().join(", "))),
        Ok(pdirs) => {
            if pdirs.is_empty() {
                tried.push(format!("python3: none of the modules {} is installed", lib.python_modules().join(", ")));
            }
            for d in pdirs {
                if let Some(f) = try_dir(&d, &mut tried) {
                    return SearchReport { lib, found: Some(f), tried };
                }
            }
        }
    }
    SearchReport { lib, found: None, tried }
}

/// Whether `dlopen(name)` succeeds (the handle is closed again).
pub fn dlopen_ok(name: &str) -> bool {
    let Ok(c) = std::ffi::CString::new(name) else { return false };
    // SAFETY: dlopen/dlclose with a valid C string; the handle is not used otherwise.
    unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if h.is_null() {
            false
        } else {
            libc::dlclose(h);
            true
        }
    }
}

/// Asks `python3` for the `lib` folders of `modules` (those that import).
pub fn python_lib_dirs(modules: &[&str]) -> Result<Vec<PathBuf>, String> {
    let script = format!(
        "import importlib, os\nfor m in {:?}:\n    try:\n        mod = importlib.import_module(m)\n    except Exception:\n        continue\n    for p in list(getattr(mod, '__path__', [])):\n        print(os.path.join(p, 'lib'))\n",
        modules
    );
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("could not run python3: {e}"))?;
    if !out.status.success() {
        return Err(format!("python3 exited with {}", out.status));
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(PathBuf::from).collect())
}

/// Searches the real machine for `lib` (environment, loader, file system, Python).
pub fn search_system(lib: Lib) -> SearchReport {
    let mut extra = Vec::new();
    for var in ["CONDA_PREFIX", "CUDA_HOME", "CUDA_PATH", "NCCL_HOME"] {
        if let Ok(v) = std::env::var(var) {
            extra.push(PathBuf::from(&v).join("lib"));
            extra.push(PathBuf::from(&v).join("lib64"));
        }
    }
    let inputs = SearchInputs {
        env_override: std::env::var(lib.env_var()).ok(),
        ld_library_path: std::env::var("LD_LIBRARY_PATH").ok(),
        extra_dirs: extra,
        loadable: &dlopen_ok,
        exists: &|p: &Path| p.exists(),
        python_dirs: &python_lib_dirs,
    };
    search(lib, &inputs)
}

/// The folders to prepend to `LD_LIBRARY_PATH` so that a new process finds `found` under cudarc's names, creating
/// the symbolic link `found` asks for in `link_dir` (removing an older link of that name).
///
/// Errors: the link folder or link cannot be created.
pub fn ld_dirs(found: &Found, link_dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    match found {
        Found::AsIs { .. } => Ok(Vec::new()),
        Found::File { file, link } => {
            let mut dirs = Vec::new();
            if let Some(link) = link {
                std::fs::create_dir_all(link_dir)?;
                let l = link_dir.join(link);
                let _ = std::fs::remove_file(&l);
                std::os::unix::fs::symlink(file, &l)?;
                dirs.push(link_dir.to_path_buf());
            }
            if let Some(parent) = file.parent() {
                dirs.push(parent.to_path_buf());
            }
            Ok(dirs)
        }
    }
}

/// `LD_LIBRARY_PATH` with `dirs` in front (those already in it are not repeated).
pub fn prepend_ld_path(current: Option<&str>, dirs: &[PathBuf]) -> String {
    let old: Vec<&str> = current.unwrap_or("").split(':').filter(|d| !d.is_empty()).collect();
    let mut out: Vec<String> = Vec::new();
    for d in dirs {
        let s = d.to_string_lossy().into_owned();
        if !out.contains(&s) {
            out.push(s);
        }
    }
    for d in old {
        if !out.iter().any(|o| o == d) {
            out.push(d.to_string());
        }
    }
    out.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn run(
        lib: Lib,
        env: Option<&str>,
        ld: Option<&str>,
        files: &[&str],
        loadable_names: &[&str],
        py: Result<Vec<&str>, &str>,
    ) -> SearchReport {
        let files: BTreeSet<PathBuf> = files.iter().map(PathBuf::from).collect();
        let loadable_names: BTreeSet<String> = loadable_names.iter().map(|s| s.to_string()).collect();
        let files2 = files.clone();
        let loadable = move |n: &str| loadable_names.contains(n) || (n.starts_with('/') && files2.contains(Path::new(n)));
        let exists = |p: &Path| files.contains(p);
        let py = py.map(|v| v.iter().map(PathBuf::from).collect::<Vec<_>>()).map_err(|e| e.to_string());
        let python = move |_: &[&str]| py.clone();
        search(
            lib,
            &SearchInputs {
                env_override: env.map(String::from),
                ld_library_path: ld.map(String::from),
                extra_dirs: vec![],
                loadable: &loadable,
                exists: &exists,
                python_dirs: &python,
            },
        )
    }

    #[test]
    fn env_override_file_wins_and_gets_a_link() {
        let r = run(Lib::Nccl, Some("/x/libnccl.so.2"), None, &["/x/libnccl.so.2"], &["libnccl.so"], Ok(vec![]));
        assert_eq!(
            r.found,
            Some(Found::File { file: "/x/libnccl.so.2".into(), link: Some("libnccl.so".into()) })
        );
    }

    #[test]
    fn env_override_folder() {
        let r = run(Lib::Nccl, Some("/x"), None, &["/x/libnccl.so"], &[], Ok(vec![]));
        assert_eq!(r.found, Some(Found::File { file: "/x/libnccl.so".into(), link: None }));
    }

    #[test]
    fn broken_override_falls_through_to_loader() {
        let r = run(Lib::Nccl, Some("/nope"), None, &[], &["libnccl.so"], Ok(vec![]));
        assert_eq!(r.found, Some(Found::AsIs { name: "libnccl.so".into() }));
        assert!(r.tried[0].contains("CUORDER_NCCL_LIB=/nope: no such file"), "{:?}", r.tried);
    }

    #[test]
    fn ld_library_path_folder_before_usual_dirs() {
        let r = run(
            Lib::Nccl,
            None,
            Some("/a:/b"),
            &["/b/libnccl.so.2", "/usr/lib/x86_64-linux-gnu/libnccl.so.2"],
            &[],
            Ok(vec![]),
        );
        assert_eq!(r.found, Some(Found::File { file: "/b/libnccl.so.2".into(), link: Some("libnccl.so".into()) }));
    }

    #[test]
    fn python_last_and_tried_lists_everything() {
        let r = run(Lib::Nccl, None, None, &["/py/nccl/lib/libnccl.so.2"], &[], Ok(vec!["/py/nccl/lib"]));
        assert_eq!(
            r.found,
            Some(Found::File { file: "/py/nccl/lib/libnccl.so.2".into(), link: Some("libnccl.so".into()) })
        );
        assert!(r.tried.iter().any(|t| t.contains("/usr/local/cuda/lib64")));
        let r = run(Lib::Nccl, None, None, &[], &[], Err("could not run python3: not found"));
        assert_eq!(r.found, None);
        let m = r.not_found_message();
        assert!(m.contains("CUORDER_NCCL_LIB: not set") && m.contains("python3") && m.contains("/opt/nccl/lib"), "{m}");
    }

    #[test]
    fn nvrtc_versioned_name_needs_no_link() {
        let r = run(Lib::Nvrtc, None, None, &["/usr/local/cuda/lib64/libnvrtc.so.13"], &[], Ok(vec![]));
        assert_eq!(
            r.found,
            Some(Found::File { file: "/usr/local/cuda/lib64/libnvrtc.so.13".into(), link: None })
        );
    }

    #[test]
    fn prepend_keeps_order_and_dedups() {
        let s = prepend_ld_path(Some("/b:/c"), &[PathBuf::from("/a"), PathBuf::from("/b")]);
        assert_eq!(s, "/a:/b:/c");
    }
}
