//! The instrumentation kernels (`kernels/*.cu`): their source, the host mirrors of their structs, and their
//! compilation with NVRTC for the GPU at hand.

use crate::error::HwError;

/// The kernel sources in the order they are concatenated (each later file uses the earlier ones).
pub const SOURCES: [(&str, &str); 5] = [
    ("common.cu", include_str!("../../kernels/common.cu")),
    ("spin.cu", include_str!("../../kernels/spin.cu")),
    ("stamp.cu", include_str!("../../kernels/stamp.cu")),
    ("probe.cu", include_str!("../../kernels/probe.cu")),
    ("op.cu", include_str!("../../kernels/op.cu")),
];

/// Kernel entry points, by name.
pub const KERNEL_NAMES: [&str; 5] = ["cuorder_op", "cuorder_mark", "cuorder_spin", "cuorder_stamp", "cuorder_probe"];

/// The whole NVRTC source.
pub fn source() -> String {
    let mut s = String::new();
    for (name, text) in SOURCES {
        s.push_str(&format!("// ---- kernels/{name}\n"));
        s.push_str(text);
        s.push('\n');
    }
    s
}

/// Host mirror of `TraceSlot` (host-mapped): `%globaltimer` ns, 0 = not yet.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceSlot {
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Host mirror of `TraceScratch` (device memory).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceScratch {
    pub start_min: u64,
    pub end_max: u64,
    pub started: u32,
    pub done: u32,
}

impl TraceScratch {
    /// The initial value the kernels expect.
    pub const INIT: TraceScratch = TraceScratch { start_min: u64::MAX, end_max: 0, started: 0, done: 0 };
}

/// Host mirror of `ObsSlot` (host-mapped).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObsSlot {
    pub first: u32,
    pub last: u32,
    pub min: u32,
    pub max: u32,
    pub done: u32,
    pub pad: [u32; 3],
}

/// Host mirror of `ObsScratch` (device memory).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObsScratch {
    pub first: u32,
    pub last: u32,
    pub min: u32,
    pub max: u32,
}

impl ObsScratch {
    /// The initial value the kernels expect.
    pub const INIT: ObsScratch = ObsScratch { first: 0, last: 0, min: u32::MAX, max: 0 };
}

/// Host mirror of `Range`: a device-accessible address and a count of 4-byte words.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    pub ptr: u64,
    pub words: u64,
    pub slot: u32,
    pub pad: u32,
}

const _: () = assert!(std::mem::size_of::<TraceSlot>() == 16);
const _: () = assert!(std::mem::size_of::<TraceScratch>() == 24);
const _: () = assert!(std::mem::size_of::<ObsSlot>() == 32);
const _: () = assert!(std::mem::size_of::<ObsScratch>() == 16);
const _: () = assert!(std::mem::size_of::<Range>() == 24);

/// Whether NVRTC can be loaded by this process.
pub fn nvrtc_available() -> bool {
    // SAFETY: only tries dlopen of cudarc's candidate names.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

fn nvrtc_err(r: cudarc::nvrtc::sys::nvrtcResult) -> String {
    // SAFETY: nvrtcGetErrorString returns a static C string.
    unsafe {
        let p = cudarc::nvrtc::sys::nvrtcGetErrorString(r);
        if p.is_null() {
            format!("{r:?}")
        } else {
            std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

/// Compiles [`source`] to a cubin for compute capability `arch` = (major, minor).
///
/// Errors: [`HwError::Library`] if NVRTC cannot be loaded, [`HwError::Nvrtc`] with the compile log otherwise.
pub fn compile_cubin(arch: (i32, i32)) -> Result<Vec<u8>, HwError> {
    use cudarc::nvrtc::{result, sys};
    if !nvrtc_available() {
        return Err(HwError::Library(format!(
            "NVRTC cannot be loaded (tried {}); set CUORDER_NVRTC_LIB or LD_LIBRARY_PATH",
            crate::libsearch::Lib::Nvrtc.cudarc_names().join(", ")
        )));
    }
    let src = std::ffi::CString::new(source()).map_err(|_| HwError::Format("kernel source contains NUL".into()))?;
    let prog = result::create_program(&src, Some(c"cuorder_kernels.cu"))
        .map_err(|e| HwError::Nvrtc { message: nvrtc_err(e.0), log: String::new() })?;
    let opts = [format!("--gpu-architecture=sm_{}{}", arch.0, arch.1), "--std=c++17".to_string(), "-default-device".to_string()];
    // SAFETY: `prog` is a live program created above and destroyed below.
    let res = unsafe { result::compile_program(prog, &opts) };
    let log = unsafe { result::get_program_log(prog) }
        .map(|l| {
            let bytes: Vec<u8> = l.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
            String::from_utf8_lossy(&bytes).into_owned()
        })
        .unwrap_or_default();
    if let Err(e) = res {
        unsafe {
            let _ = result::destroy_program(prog);
        }
        return Err(HwError::Nvrtc { message: nvrtc_err(e.0), log });
    }
    let mut size = 0usize;
    // SAFETY: `prog` compiled successfully; the buffer has the size NVRTC reports.
    let cubin = unsafe {
        let r = sys::nvrtcGetCUBINSize(prog, &mut size);
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            let _ = result::destroy_program(prog);
            return Err(HwError::Nvrtc { message: nvrtc_err(r), log });
        }
        let mut buf = vec![0u8; size];
        let r = sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut std::ffi::c_char);
        let _ = result::destroy_program(prog);
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            return Err(HwError::Nvrtc { message: nvrtc_err(r), log });
        }
        buf
    };
    Ok(cubin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_starts_with_a_doc_line_and_kernels_exist() {
        for (name, text) in SOURCES {
            assert!(text.starts_with("//!"), "kernels/{name} must start with a //! line");
        }
        let s = source();
        for k in KERNEL_NAMES {
            assert!(s.contains(&format!("__global__ void {k}(")), "missing kernel {k}");
        }
    }

    /// Compiles the kernels when NVRTC is present (no GPU needed); says that it skipped otherwise.
    #[test]
    fn kernels_compile_with_nvrtc_when_present() {
        if !nvrtc_available() {
            eprintln!("skipped: NVRTC not loadable (set LD_LIBRARY_PATH to a folder with libnvrtc.so.13)");
            return;
        }
        match compile_cubin((9, 0)) {
            Ok(c) => assert!(c.len() > 1000),
            Err(e) => panic!("{e}"),
        }
    }
}
