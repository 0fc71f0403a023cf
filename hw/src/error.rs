//! The executor's error type: every failure says what was being done and what the library said.

use crate::lower::LowerError;

/// Everything that can stop a hardware run before it produces an observation.
#[derive(Debug)]
pub enum HwError {
    /// No CUDA driver library, `cuInit` failed, or no device: the run cannot happen on this machine.
    NoGpu(String),
    /// The program has more ranks than the machine has GPUs (one GPU per rank).
    NotEnoughGpus { needed: usize, found: usize },
    /// A library (NCCL, NVRTC) could not be found or loaded; the message lists what was tried.
    Library(String),
    /// The program cannot be lowered for hardware.
    Lower(Vec<LowerError>),
    /// A CUDA driver call failed.
    Cuda { call: &'static str, message: String },
    /// An NCCL call failed.
    Nccl { call: &'static str, message: String },
    /// NVRTC failed to compile the kernels.
    Nvrtc { message: String, log: String },
    /// A file or process operation failed.
    Io { what: String, source: std::io::Error },
    /// A malformed input file or message (program file, unique-id file, rank log).
    Format(String),
}

impl std::fmt::Display for HwError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HwError::NoGpu(m) => write!(f, "no GPU available: {m}"),
            HwError::NotEnoughGpus { needed, found } => {
                write!(f, "the program has {needed} ranks but this machine has {found} GPU(s) (one GPU per rank)")
            }
            HwError::Library(m) => write!(f, "{m}"),
            HwError::Lower(errs) => {
                writeln!(f, "the program cannot run on hardware ({} problem(s)):", errs.len())?;
                for e in errs {
                    writeln!(f, "  {e}")?;
                }
                Ok(())
            }
            HwError::Cuda { call, message } => write!(f, "CUDA call {call} failed: {message}"),
            HwError::Nccl { call, message } => write!(f, "NCCL call {call} failed: {message}"),
            HwError::Nvrtc { message, log } => write!(f, "NVRTC failed to compile the kernels: {message}\n{log}"),
            HwError::Io { what, source } => write!(f, "{what}: {source}"),
            HwError::Format(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for HwError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HwError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl HwError {
    /// An [`HwError::Io`] with context.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> HwError {
        HwError::Io { what: what.into(), source }
    }
}
