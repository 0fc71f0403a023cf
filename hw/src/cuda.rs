//! The thin unsafe layer over cudarc's `result`/`sys` functions (driver, NCCL): plain handles, every call checked and
//! turned into an [`HwError`] that names the call. Nothing here adds synchronization: each function is exactly one
//! driver or NCCL call (plus error-string look-ups). cudarc types stay inside this crate.

use crate::error::HwError;
use cudarc::driver::sys as cu;
use cudarc::nccl::sys as nc;
use std::ffi::{c_void, CStr};

pub use cu::{CUdeviceptr, CUevent, CUfunction, CUmodule, CUstream};
pub use nc::{ncclComm_t, ncclDataType_t, ncclUniqueId};

/// The per-thread default stream handle (`CU_STREAM_PER_THREAD`).
pub const STREAM_PER_THREAD: CUstream = 0x2 as CUstream;
/// The legacy default stream (the null stream under the non-`_ptsz` driver API that cudarc loads).
pub const STREAM_LEGACY_NULL: CUstream = std::ptr::null_mut();

fn cu_msg(r: cu::CUresult) -> String {
    let e = cudarc::driver::result::DriverError(r);
    let name = e.error_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{r:?}"));
    let text = e.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    format!("{name}: {text}")
}

/// Checks a driver result.
///
/// Errors: [`HwError::Cuda`] naming `call` and the driver's error name and text.
pub fn check(r: cu::CUresult, call: &'static str) -> Result<(), HwError> {
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(HwError::Cuda { call, message: cu_msg(r) })
    }
}

/// The text NCCL gives for a result code.
pub fn nccl_msg(r: nc::ncclResult_t, comm: Option<ncclComm_t>) -> String {
    // SAFETY: both functions return static or comm-owned C strings (or null).
    unsafe {
        let p = nc::ncclGetErrorString(r);
        let mut m = if p.is_null() { format!("{r:?}") } else { CStr::from_ptr(p).to_string_lossy().into_owned() };
        if let Some(c) = comm {
            let l = nc::ncclGetLastError(c);
            if !l.is_null() {
                let l = CStr::from_ptr(l).to_string_lossy();
                if !l.is_empty() {
                    m.push_str(": ");
                    m.push_str(&l);
                }
            }
        }
        m
    }
}

/// Checks an NCCL result. `ncclInProgress` counts as success: only a non-blocking communicator returns it, and the
/// program polls it with [`comm_poll`] before its next call (N12).
///
/// Errors: [`HwError::Nccl`] naming `call` and NCCL's text.
pub fn nccl_check(r: nc::ncclResult_t, call: &'static str, comm: Option<ncclComm_t>) -> Result<(), HwError> {
    if r == nc::ncclResult_t::ncclSuccess || r == nc::ncclResult_t::ncclInProgress {
        Ok(())
    } else {
        Err(HwError::Nccl { call, message: nccl_msg(r, comm) })
    }
}

/// What the machine offers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverStatus {
    /// `libcuda.so` cannot be loaded.
    NoLibrary,
    /// `cuInit` failed (no device, driver mismatch, ...).
    InitFailed(String),
    /// This many devices.
    Devices(usize),
}

/// Loads the driver library if it can, initializes it and counts devices. Never panics.
pub fn driver_status() -> DriverStatus {
    // SAFETY: is_culib_present only tries dlopen; the calls after it run only when the library loaded.
    unsafe {
        if !cu::is_culib_present() {
            return DriverStatus::NoLibrary;
        }
        let r = cu::cuInit(0);
        if r != cu::CUresult::CUDA_SUCCESS {
            return DriverStatus::InitFailed(cu_msg(r));
        }
        let mut n = 0;
        let r = cu::cuDeviceGetCount(&mut n);
        if r != cu::CUresult::CUDA_SUCCESS {
            return DriverStatus::InitFailed(cu_msg(r));
        }
        DriverStatus::Devices(n.max(0) as usize)
    }
}

/// `cuDriverGetVersion`; `None` when the driver library cannot be loaded.
pub fn driver_version() -> Option<i32> {
    // SAFETY: is_culib_present only tries dlopen; the call after it runs only when the library loads.
    unsafe {
        if !cu::is_culib_present() {
            return None;
        }
        let mut v = 0;
        (cu::cuDriverGetVersion(&mut v) == cu::CUresult::CUDA_SUCCESS).then_some(v)
    }
}

/// Whether NCCL can be loaded under cudarc's names by this process.
pub fn nccl_available() -> bool {
    // SAFETY: only tries dlopen.
    unsafe { nc::is_culib_present() }
}

/// `ncclGetVersion`; `None` when NCCL cannot be loaded.
pub fn nccl_version() -> Option<i32> {
    if !nccl_available() {
        return None;
    }
    cudarc::nccl::result::get_nccl_version().ok()
}

/// `ncclGetUniqueId` (call only when [`nccl_available`]). The id's bootstrap root lives in the calling process.
///
/// Errors: [`HwError::Nccl`].
pub fn nccl_unique_id() -> Result<ncclUniqueId, HwError> {
    cudarc::nccl::result::get_uniqueid()
        .map_err(|e| HwError::Nccl { call: "ncclGetUniqueId", message: nccl_msg(e.0, None) })
}

/// An NCCL unique id as hex text (for the id file).
pub fn unique_id_to_hex(id: &ncclUniqueId) -> String {
    id.internal.iter().map(|&b| format!("{:02x}", b as u8)).collect()
}

/// Parses [`unique_id_to_hex`] output.
///
/// Errors: [`HwError::Format`] unless the text is exactly 256 hex digits.
pub fn unique_id_from_hex(s: &str) -> Result<ncclUniqueId, HwError> {
    let s = s.trim();
    if s.len() != 256 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(HwError::Format(format!("an NCCL unique id is 256 hex digits, got {} characters", s.len())));
    }
    let mut id = ncclUniqueId { internal: [0; 128] };
    for i in 0..128 {
        let b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| HwError::Format(e.to_string()))?;
        id.internal[i] = b as std::ffi::c_char;
    }
    Ok(id)
}

/// One GPU's context (the primary context, as NCCL's runtime calls use it), kept alive for the process.
#[derive(Clone)]
pub struct Device {
    ctx: std::sync::Arc<cudarc::driver::CudaContext>,
}

// SAFETY: the context handle is usable from any thread once bound with `bind`.
unsafe impl Send for Device {}
unsafe impl Sync for Device {}

impl Device {
    /// Retains the primary context of device `ordinal`, binds it to this thread, and turns cudarc's automatic event
    /// tracking off before anything is allocated (so cudarc orders nothing the program did not ask for).
    ///
    /// Errors: [`HwError::Cuda`].
    pub fn open(ordinal: usize) -> Result<Device, HwError> {
        let ctx = cudarc::driver::CudaContext::new(ordinal)
            .map_err(|e| HwError::Cuda { call: "cuDevicePrimaryCtxRetain", message: cu_msg(e.0) })?;
        // SAFETY: nothing has been allocated through cudarc yet; we never allocate through its safe layer anyway.
        unsafe { ctx.disable_event_tracking() };
        Ok(Device { ctx })
    }

    /// Makes the context current on the calling thread.
    ///
    /// Errors: [`HwError::Cuda`].
    pub fn bind(&self) -> Result<(), HwError> {
        self.ctx.bind_to_thread().map_err(|e| HwError::Cuda { call: "cuCtxSetCurrent", message: cu_msg(e.0) })
    }

    /// `cuDeviceGetName`.
    pub fn name(&self) -> String {
        self.ctx.name().unwrap_or_else(|_| "unknown".into())
    }

    /// Compute capability (major, minor).
    pub fn compute_capability(&self) -> (i32, i32) {
        self.ctx.compute_capability().unwrap_or((0, 0))
    }

    /// Number of multiprocessors.
    pub fn sm_count(&self) -> u32 {
        self.ctx
            .attribute(cu::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map(|n| n.max(1) as u32)
            .unwrap_or(1)
    }

    /// The PCI bus id, e.g. `0000:18:00.0`.
    pub fn pci_bus_id(&self) -> Option<String> {
        let mut buf = [0 as std::ffi::c_char; 64];
        // SAFETY: the buffer is 64 bytes as passed.
        let r = unsafe { cu::cuDeviceGetPCIBusId(buf.as_mut_ptr(), 64, self.ctx.cu_device()) };
        if r != cu::CUresult::CUDA_SUCCESS {
            return None;
        }
        // SAFETY: NUL-terminated by the driver.
        Some(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
    }
}

// ---- memory -------------------------------------------------------------------------------------------------------

/// `cuMemAlloc` of `bytes` bytes (at least 4), then a synchronous zero fill (set-up only).
pub fn alloc_device_zeroed(bytes: usize) -> Result<CUdeviceptr, HwError> {
    let bytes = bytes.max(4);
    let mut p = 0;
    // SAFETY: out-parameter call; the memset covers exactly the allocation.
    unsafe {
        check(cu::cuMemAlloc_v2(&mut p, bytes), "cuMemAlloc")?;
        check(cu::cuMemsetD8_v2(p, 0, bytes), "cuMemsetD8")?;
    }
    Ok(p)
}

/// `cuMemHostAlloc(DEVICEMAP | PORTABLE)` of `bytes` bytes (at least 4), zeroed; returns the host pointer and the
/// device pointer of the mapping (equal under unified addressing).
pub fn alloc_pinned_zeroed(bytes: usize) -> Result<(*mut u8, CUdeviceptr), HwError> {
    let bytes = bytes.max(4);
    let mut h: *mut c_void = std::ptr::null_mut();
    let mut d = 0;
    // SAFETY: out-parameter calls; the host memory is `bytes` long.
    unsafe {
        check(
            cu::cuMemHostAlloc(&mut h, bytes, cu::CU_MEMHOSTALLOC_DEVICEMAP | cu::CU_MEMHOSTALLOC_PORTABLE),
            "cuMemHostAlloc",
        )?;
        std::ptr::write_bytes(h as *mut u8, 0, bytes);
        check(cu::cuMemHostGetDevicePointer_v2(&mut d, h, 0), "cuMemHostGetDevicePointer")?;
    }
    Ok((h as *mut u8, d))
}

/// Synchronous host-to-device copy (set-up only).
pub fn copy_htod_sync(dst: CUdeviceptr, src: &[u8]) -> Result<(), HwError> {
    if src.is_empty() {
        return Ok(());
    }
    // SAFETY: `src` is valid for its length; the caller sized `dst`.
    unsafe { check(cu::cuMemcpyHtoD_v2(dst, src.as_ptr() as *const c_void, src.len()), "cuMemcpyHtoD") }
}

/// `cuMemsetD32Async(dst, value, words, stream)`.
///
/// # Safety
/// `dst` must be a device-accessible address of at least `words` 4-byte words.
pub unsafe fn memset_d32_async(dst: CUdeviceptr, value: u32, words: usize, s: CUstream) -> Result<(), HwError> {
    check(cu::cuMemsetD32Async(dst, value, words, s), "cuMemsetD32Async")
}

/// `cuMemsetD32` (synchronous, legacy stream).
///
/// # Safety
/// As [`memset_d32_async`].
pub unsafe fn memset_d32_sync(dst: CUdeviceptr, value: u32, words: usize) -> Result<(), HwError> {
    check(cu::cuMemsetD32_v2(dst, value, words), "cuMemsetD32")
}

/// `cuMemcpyAsync` (direction inferred from the addresses under unified addressing).
///
/// # Safety
/// Both addresses must be valid for `bytes` bytes.
pub unsafe fn memcpy_async(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, s: CUstream) -> Result<(), HwError> {
    check(cu::cuMemcpyAsync(dst, src, bytes, s), "cuMemcpyAsync")
}

/// `cuMemcpy` (synchronous).
///
/// # Safety
/// As [`memcpy_async`].
pub unsafe fn memcpy_sync(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) -> Result<(), HwError> {
    check(cu::cuMemcpy(dst, src, bytes), "cuMemcpy")
}

// ---- streams and events -------------------------------------------------------------------------------------------

/// `cuStreamCreate` with default flags (`blocking == true`: synchronizes with the legacy stream) or
/// `CU_STREAM_NON_BLOCKING`.
pub fn stream_create(blocking: bool) -> Result<CUstream, HwError> {
    let mut s = std::ptr::null_mut();
    let flags = if blocking { cu::CUstream_flags::CU_STREAM_DEFAULT } else { cu::CUstream_flags::CU_STREAM_NON_BLOCKING };
    // SAFETY: out-parameter call.
    unsafe { check(cu::cuStreamCreate(&mut s, flags as u32), "cuStreamCreate")? };
    Ok(s)
}

/// `cuEventCreate(CU_EVENT_DISABLE_TIMING)`.
pub fn event_create() -> Result<CUevent, HwError> {
    let mut e = std::ptr::null_mut();
    // SAFETY: out-parameter call.
    unsafe { check(cu::cuEventCreate(&mut e, cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32), "cuEventCreate")? };
    Ok(e)
}

/// `cuEventRecord`.
///
/// # Safety
/// Live handles of the current context.
pub unsafe fn event_record(e: CUevent, s: CUstream) -> Result<(), HwError> {
    check(cu::cuEventRecord(e, s), "cuEventRecord")
}

/// `cuStreamWaitEvent(s, e, 0)`.
///
/// # Safety
/// Live handles of the current context.
pub unsafe fn stream_wait_event(s: CUstream, e: CUevent) -> Result<(), HwError> {
    check(cu::cuStreamWaitEvent(s, e, 0), "cuStreamWaitEvent")
}

/// `cuEventQuery`: `Ok(true)` ready, `Ok(false)` not ready.
///
/// # Safety
/// A live event.
pub unsafe fn event_query(e: CUevent) -> Result<bool, HwError> {
    match cu::cuEventQuery(e) {
        cu::CUresult::CUDA_SUCCESS => Ok(true),
        cu::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        r => Err(HwError::Cuda { call: "cuEventQuery", message: cu_msg(r) }),
    }
}

/// `cuStreamQuery`: `Ok(true)` idle, `Ok(false)` busy.
///
/// # Safety
/// A live stream.
pub unsafe fn stream_query(s: CUstream) -> Result<bool, HwError> {
    match cu::cuStreamQuery(s) {
        cu::CUresult::CUDA_SUCCESS => Ok(true),
        cu::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        r => Err(HwError::Cuda { call: "cuStreamQuery", message: cu_msg(r) }),
    }
}

/// `cuEventSynchronize`.
///
/// # Safety
/// A live event.
pub unsafe fn event_synchronize(e: CUevent) -> Result<(), HwError> {
    check(cu::cuEventSynchronize(e), "cuEventSynchronize")
}

/// `cuStreamSynchronize`.
///
/// # Safety
/// A live stream.
pub unsafe fn stream_synchronize(s: CUstream) -> Result<(), HwError> {
    check(cu::cuStreamSynchronize(s), "cuStreamSynchronize")
}

/// `cuCtxSynchronize` of the current context.
pub fn ctx_synchronize() -> Result<(), HwError> {
    // SAFETY: no arguments.
    unsafe { check(cu::cuCtxSynchronize(), "cuCtxSynchronize") }
}

// ---- modules and launches -----------------------------------------------------------------------------------------

/// `cuModuleLoadData` of a cubin image.
pub fn module_load(image: &[u8]) -> Result<CUmodule, HwError> {
    let mut m = std::ptr::null_mut();
    // SAFETY: the image is a complete cubin that outlives the call.
    unsafe { check(cu::cuModuleLoadData(&mut m, image.as_ptr() as *const c_void), "cuModuleLoadData")? };
    Ok(m)
}

/// `cuModuleGetFunction`.
pub fn module_function(m: CUmodule, name: &str) -> Result<CUfunction, HwError> {
    let c = std::ffi::CString::new(name).map_err(|_| HwError::Format("kernel name contains NUL".into()))?;
    let mut f = std::ptr::null_mut();
    // SAFETY: a live module and a valid C string.
    unsafe { check(cu::cuModuleGetFunction(&mut f, m, c.as_ptr()), "cuModuleGetFunction")? };
    Ok(f)
}

/// `cuLaunchKernel(f, grid, block, 0 shared bytes, stream, params)`.
///
/// # Safety
/// `params` must point at values matching the kernel's parameter list exactly.
pub unsafe fn launch(f: CUfunction, grid: u32, block: u32, s: CUstream, params: &mut [*mut c_void]) -> Result<(), HwError> {
    check(
        cu::cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, params.as_mut_ptr(), std::ptr::null_mut()),
        "cuLaunchKernel",
    )
}

// ---- NCCL ---------------------------------------------------------------------------------------------------------

/// `ncclCommInitRank` (blocking communicator).
pub fn comm_init_rank(nranks: i32, id: ncclUniqueId, rank: i32) -> Result<ncclComm_t, HwError> {
    let mut c = std::ptr::null_mut();
    // SAFETY: out-parameter call.
    let r = unsafe { nc::ncclCommInitRank(&mut c, nranks, id, rank) };
    nccl_check(r, "ncclCommInitRank", None)?;
    Ok(c)
}

/// The `ncclConfig_t` of `NCCL_CONFIG_INITIALIZER` (nccl.h: size, magic `0xcafebeef`, version, every other field
/// `NCCL_CONFIG_UNDEF_INT` / null) with `blocking` set (N12: 0 makes every call on the communicator non-blocking).
pub fn comm_config(blocking: bool) -> nc::ncclConfig_t {
    const UNDEF: i32 = i32::MIN;
    // SAFETY: the config is plain old data (integers and nullable pointers); all-zero is a valid value that the
    // fields below overwrite.
    let mut c: nc::ncclConfig_t = unsafe { std::mem::zeroed() };
    c.size = std::mem::size_of::<nc::ncclConfig_t>();
    c.magic = 0xcafe_beef;
    // NCCL_VERSION(2, 28, 0): the layout of `ncclConfig_v22800`, which NCCL reads up to `size`.
    c.version = 22800;
    c.blocking = i32::from(blocking);
    c.cgaClusterSize = UNDEF;
    c.minCTAs = UNDEF;
    c.maxCTAs = UNDEF;
    c.splitShare = UNDEF;
    c.trafficClass = UNDEF;
    c.collnetEnable = UNDEF;
    c.CTAPolicy = UNDEF;
    c.shrinkShare = UNDEF;
    c.nvlsCTAs = UNDEF;
    c.nChannelsPerNetPeer = UNDEF;
    c.nvlinkCentricSched = UNDEF;
    c.graphUsageMode = UNDEF;
    c.numRmaCtx = UNDEF;
    c.maxP2pPeers = UNDEF;
    c
}

/// `ncclCommInitRankConfig` with `config.blocking = blocking` (N8, N12). A non-blocking init may return with the
/// communicator `ncclInProgress`: poll it ([`comm_poll`]) before using it.
///
/// Errors: [`HwError::Nccl`].
pub fn comm_init_rank_config(nranks: i32, id: ncclUniqueId, rank: i32, blocking: bool) -> Result<ncclComm_t, HwError> {
    let mut c = std::ptr::null_mut();
    let mut config = comm_config(blocking);
    // SAFETY: out-parameter call; the config lives across it.
    let r = unsafe { nc::ncclCommInitRankConfig(&mut c, nranks, id, rank, &mut config) };
    nccl_check(r, "ncclCommInitRankConfig", None)?;
    Ok(c)
}

/// `ncclCommGetAsyncError(comm)` in a loop until it stops returning `ncclInProgress` (N12); the host spins (yielding)
/// meanwhile, as NCCL's documentation shows.
///
/// Errors: [`HwError::Nccl`] when the call fails or the asynchronous state is an error.
pub fn comm_poll(comm: ncclComm_t) -> Result<(), HwError> {
    loop {
        let mut state = nc::ncclResult_t::ncclSuccess;
        // SAFETY: `comm` is a live communicator; out-parameter call.
        let r = unsafe { nc::ncclCommGetAsyncError(comm, &mut state) };
        if r != nc::ncclResult_t::ncclSuccess {
            return Err(HwError::Nccl { call: "ncclCommGetAsyncError", message: nccl_msg(r, Some(comm)) });
        }
        match state {
            nc::ncclResult_t::ncclInProgress => std::thread::yield_now(),
            nc::ncclResult_t::ncclSuccess => return Ok(()),
            e => return Err(HwError::Nccl { call: "ncclCommGetAsyncError", message: nccl_msg(e, Some(comm)) }),
        }
    }
}

/// `ncclCommAbort(comm)` (N13): ends the communicator's work on the device and frees it.
///
/// Errors: [`HwError::Nccl`].
pub fn comm_abort(comm: ncclComm_t) -> Result<(), HwError> {
    // SAFETY: `comm` is a live communicator, not used again after this call.
    nccl_check(unsafe { nc::ncclCommAbort(comm) }, "ncclCommAbort", None)
}

/// `ncclCommFinalize(comm)` (N13): flushes the communicator's work; collective over its members (in progress on a
/// non-blocking communicator).
///
/// Errors: [`HwError::Nccl`].
pub fn comm_finalize(comm: ncclComm_t) -> Result<(), HwError> {
    // SAFETY: `comm` is a live communicator.
    nccl_check(unsafe { nc::ncclCommFinalize(comm) }, "ncclCommFinalize", Some(comm))
}

/// `ncclCommDestroy(comm)` (N13): frees the communicator (finalizing it first if the program did not).
///
/// Errors: [`HwError::Nccl`].
pub fn comm_destroy(comm: ncclComm_t) -> Result<(), HwError> {
    // SAFETY: `comm` is a live communicator, not used again after this call.
    nccl_check(unsafe { nc::ncclCommDestroy(comm) }, "ncclCommDestroy", None)
}

/// `ncclCommSplit(parent, color, key, &new, NULL)` (N8: every member of `parent` must call it). Returns the new
/// communicator, null for `color == NCCL_SPLIT_NOCOLOR` (-1).
pub fn comm_split(parent: ncclComm_t, color: i32, key: i32) -> Result<ncclComm_t, HwError> {
    let mut c = std::ptr::null_mut();
    // SAFETY: `parent` is a live communicator; out-parameter call; a null config inherits the parent's.
    let r = unsafe { nc::ncclCommSplit(parent, color, key, &mut c, std::ptr::null_mut()) };
    nccl_check(r, "ncclCommSplit", Some(parent))?;
    Ok(c)
}

/// `ncclSend` of `bytes` bytes (`ncclUint8`).
///
/// # Safety
/// `buf` device-accessible for `bytes` bytes; live comm and stream.
pub unsafe fn send(buf: CUdeviceptr, bytes: usize, peer: i32, comm: ncclComm_t, s: CUstream) -> Result<(), HwError> {
    let r = nc::ncclSend(buf as *const c_void, bytes, nc::ncclDataType_t::ncclUint8, peer, comm, s as nc::cudaStream_t);
    nccl_check(r, "ncclSend", Some(comm))
}

/// `ncclRecv` of `bytes` bytes (`ncclUint8`).
///
/// # Safety
/// As [`send`].
pub unsafe fn recv(buf: CUdeviceptr, bytes: usize, peer: i32, comm: ncclComm_t, s: CUstream) -> Result<(), HwError> {
    let r = nc::ncclRecv(buf as *mut c_void, bytes, nc::ncclDataType_t::ncclUint8, peer, comm, s as nc::cudaStream_t);
    nccl_check(r, "ncclRecv", Some(comm))
}

/// `ncclAllReduce(max)` over `count` elements of `dt`.
///
/// # Safety
/// Buffers device-accessible and large enough; live comm and stream.
pub unsafe fn all_reduce_max(
    send: CUdeviceptr,
    recv: CUdeviceptr,
    count: usize,
    dt: ncclDataType_t,
    comm: ncclComm_t,
    s: CUstream,
) -> Result<(), HwError> {
    let r = nc::ncclAllReduce(
        send as *const c_void,
        recv as *mut c_void,
        count,
        dt,
        nc::ncclRedOp_t::ncclMax,
        comm,
        s as nc::cudaStream_t,
    );
    nccl_check(r, "ncclAllReduce", Some(comm))
}

/// `ncclReduceScatter(max)` with `recv_count` elements of `dt` per member.
///
/// # Safety
/// As [`all_reduce_max`].
pub unsafe fn reduce_scatter_max(
    send: CUdeviceptr,
    recv: CUdeviceptr,
    recv_count: usize,
    dt: ncclDataType_t,
    comm: ncclComm_t,
    s: CUstream,
) -> Result<(), HwError> {
    let r = nc::ncclReduceScatter(
        send as *const c_void,
        recv as *mut c_void,
        recv_count,
        dt,
        nc::ncclRedOp_t::ncclMax,
        comm,
        s as nc::cudaStream_t,
    );
    nccl_check(r, "ncclReduceScatter", Some(comm))
}

/// `ncclBroadcast` of `bytes` bytes from communicator rank `root`.
///
/// # Safety
/// As [`all_reduce_max`].
pub unsafe fn broadcast(
    send: CUdeviceptr,
    recv: CUdeviceptr,
    bytes: usize,
    root: i32,
    comm: ncclComm_t,
    s: CUstream,
) -> Result<(), HwError> {
    let r = nc::ncclBroadcast(
        send as *const c_void,
        recv as *mut c_void,
        bytes,
        nc::ncclDataType_t::ncclUint8,
        root,
        comm,
        s as nc::cudaStream_t,
    );
    nccl_check(r, "ncclBroadcast", Some(comm))
}

/// `ncclAllGather` of `send_bytes` bytes per member.
///
/// # Safety
/// As [`all_reduce_max`].
pub unsafe fn all_gather(
    send: CUdeviceptr,
    recv: CUdeviceptr,
    send_bytes: usize,
    comm: ncclComm_t,
    s: CUstream,
) -> Result<(), HwError> {
    let r = nc::ncclAllGather(
        send as *const c_void,
        recv as *mut c_void,
        send_bytes,
        nc::ncclDataType_t::ncclUint8,
        comm,
        s as nc::cudaStream_t,
    );
    nccl_check(r, "ncclAllGather", Some(comm))
}

/// `ncclGroupStart`.
pub fn group_start() -> Result<(), HwError> {
    // SAFETY: no arguments.
    nccl_check(unsafe { nc::ncclGroupStart() }, "ncclGroupStart", None)
}

/// `ncclGroupEnd`.
pub fn group_end() -> Result<(), HwError> {
    // SAFETY: no arguments.
    nccl_check(unsafe { nc::ncclGroupEnd() }, "ncclGroupEnd", None)
}

// ---- teardown (batch runs: after the device is idle) ---------------------------------------------------------------

/// `cuMemFree` (synchronizes the device: call only when it is idle).
///
/// # Safety
/// `p` came from [`alloc_device_zeroed`] and is freed once.
pub unsafe fn free_device(p: CUdeviceptr) -> Result<(), HwError> {
    check(cu::cuMemFree_v2(p), "cuMemFree")
}

/// `cuMemFreeHost` of memory from [`alloc_pinned_zeroed`].
///
/// # Safety
/// `h` came from [`alloc_pinned_zeroed`] and is freed once.
pub unsafe fn free_pinned(h: *mut u8) -> Result<(), HwError> {
    check(cu::cuMemFreeHost(h as *mut c_void), "cuMemFreeHost")
}

// ---- host calls that may synchronize (S7) and host functions (S8) --------------------------------------------------

/// `cuMemAlloc` of `bytes` bytes (at least 4), not filled: the program's `Malloc` (S7), so that nothing but the
/// allocation itself can synchronize.
pub fn alloc_device(bytes: usize) -> Result<CUdeviceptr, HwError> {
    let mut p = 0;
    // SAFETY: out-parameter call.
    unsafe { check(cu::cuMemAlloc_v2(&mut p, bytes.max(4)), "cuMemAlloc")? };
    Ok(p)
}

/// `cuMemAllocHost` of `bytes` bytes (at least 4) of page-locked host memory, not filled: the program's
/// `MallocHost` (S7). Free it with [`free_pinned`].
pub fn alloc_host(bytes: usize) -> Result<*mut u8, HwError> {
    let mut h: *mut c_void = std::ptr::null_mut();
    // SAFETY: out-parameter call.
    unsafe { check(cu::cuMemAllocHost_v2(&mut h, bytes.max(4)), "cuMemAllocHost")? };
    Ok(h as *mut u8)
}

/// `cuModuleUnload` of a module from [`module_load`].
///
/// # Safety
/// A live module, unloaded once, whose functions are no longer used.
pub unsafe fn module_unload(m: CUmodule) -> Result<(), HwError> {
    check(cu::cuModuleUnload(m), "cuModuleUnload")
}

/// `cuLaunchHostFunc(s, f, data)`: enqueues a host function on a stream (S8).
///
/// # Safety
/// `f` must make no CUDA call and `data` must stay valid until `f` has run (it is `f`'s to release).
pub unsafe fn launch_host_func(s: CUstream, f: unsafe extern "C" fn(*mut c_void), data: *mut c_void) -> Result<(), HwError> {
    check(cu::cuLaunchHostFunc(s, Some(f), data), "cuLaunchHostFunc")
}

/// `cuStreamDestroy` of a stream from [`stream_create`].
///
/// # Safety
/// A live stream, destroyed once.
pub unsafe fn stream_destroy(s: CUstream) -> Result<(), HwError> {
    check(cu::cuStreamDestroy_v2(s), "cuStreamDestroy")
}

/// `cuEventDestroy` of an event from [`event_create`].
///
/// # Safety
/// A live event, destroyed once.
pub unsafe fn event_destroy(e: CUevent) -> Result<(), HwError> {
    check(cu::cuEventDestroy_v2(e), "cuEventDestroy")
}

/// `ncclAlltoAll` (NCCL >= 2.28) of `bytes_per_rank` bytes to and from each member (`ncclUint8`).
///
/// # Safety
/// As [`all_reduce_max`]: `send` and `recv` device-accessible for `bytes_per_rank` × members bytes.
pub unsafe fn all_to_all(send: CUdeviceptr, recv: CUdeviceptr, bytes_per_rank: usize, comm: ncclComm_t, s: CUstream) -> Result<(), HwError> {
    let r = nc::ncclAlltoAll(send as *const c_void, recv as *mut c_void, bytes_per_rank, nc::ncclDataType_t::ncclUint8, comm, s as nc::cudaStream_t);
    nccl_check(r, "ncclAlltoAll", Some(comm))
}

/// `ncclReduce(max)` of `count` elements of `dt` to communicator rank `root`.
///
/// # Safety
/// As [`all_reduce_max`].
pub unsafe fn reduce_max(
    send: CUdeviceptr,
    recv: CUdeviceptr,
    count: usize,
    dt: ncclDataType_t,
    root: i32,
    comm: ncclComm_t,
    s: CUstream,
) -> Result<(), HwError> {
    let r = nc::ncclReduce(send as *const c_void, recv as *mut c_void, count, dt, nc::ncclRedOp_t::ncclMax, root, comm, s as nc::cudaStream_t);
    nccl_check(r, "ncclReduce", Some(comm))
}

/// `ncclGather` (NCCL >= 2.28) of `send_bytes` bytes per member to communicator rank `root` (`ncclUint8`).
///
/// # Safety
/// As [`all_reduce_max`]: on the root `recv` holds `send_bytes` × members bytes.
pub unsafe fn gather(send: CUdeviceptr, recv: CUdeviceptr, send_bytes: usize, root: i32, comm: ncclComm_t, s: CUstream) -> Result<(), HwError> {
    let r = nc::ncclGather(send as *const c_void, recv as *mut c_void, send_bytes, nc::ncclDataType_t::ncclUint8, root, comm, s as nc::cudaStream_t);
    nccl_check(r, "ncclGather", Some(comm))
}

/// `ncclScatter` (NCCL >= 2.28) of `recv_bytes` bytes per member from communicator rank `root` (`ncclUint8`).
///
/// # Safety
/// As [`all_reduce_max`]: on the root `send` holds `recv_bytes` × members bytes.
pub unsafe fn scatter(send: CUdeviceptr, recv: CUdeviceptr, recv_bytes: usize, root: i32, comm: ncclComm_t, s: CUstream) -> Result<(), HwError> {
    let r = nc::ncclScatter(send as *const c_void, recv as *mut c_void, recv_bytes, nc::ncclDataType_t::ncclUint8, root, comm, s as nc::cudaStream_t);
    nccl_check(r, "ncclScatter", Some(comm))
}
