#!/usr/bin/env python3
"""How many kernel plans NCCL cuts one group of point-to-point calls into (rule N14), seen on one GPU.

One rank, a communicator of one: a group of N (ncclSend to self, ncclRecv from self) pairs on distinct buffers is
captured into a CUDA graph, and the kernel nodes of the graph are counted (one per kernel plan NCCL launches). Under
capture NCCL keeps the plans' work in persistent memory, so only the kernel-argument budget (batches per plan) limits
a plan, as it does for a launch outside capture whose work fits the arguments. Prints one JSON object per line:
{"bytes": B, "first_pairs_with_kernels": [[N, K], ..]} (the smallest group of N pairs that takes K plans). Needs libnccl.so (NCCL_LIB or PyTorch's nvidia.nccl)
and libcudart.so (CUDART_LIB or /usr/local/cuda/lib64); no Rust, no PyTorch import.
"""
import ctypes, glob, json, os, sys


def find(env, patterns):
    if os.environ.get(env):
        return os.environ[env]
    for p in patterns:
        hits = sorted(glob.glob(p))
        if hits:
            return hits[-1]
    sys.exit(f"cannot find a library for {env}: tried {patterns}")


def nccl_paths():
    pats = []
    try:
        import nvidia.nccl
        pats += [os.path.join(p, "lib", "libnccl.so*") for p in nvidia.nccl.__path__]
    except Exception:
        pass
    return pats + ["/usr/lib/x86_64-linux-gnu/libnccl.so*"]


cudart = ctypes.CDLL(find("CUDART_LIB", ["/usr/local/cuda/lib64/libcudart.so*"]))
nccl = ctypes.CDLL(find("NCCL_LIB", nccl_paths()))


def ck(what, rc):
    if rc != 0:
        sys.exit(f"{what} failed with {rc}")


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


vp = ctypes.c_void_p
nccl.ncclCommInitRank.argtypes = [ctypes.POINTER(vp), ctypes.c_int, UniqueId, ctypes.c_int]
nccl.ncclSend.argtypes = [vp, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, vp, vp]
nccl.ncclRecv.argtypes = [vp, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, vp, vp]
cudart.cudaMalloc.argtypes = [ctypes.POINTER(vp), ctypes.c_size_t]
cudart.cudaStreamCreate.argtypes = [ctypes.POINTER(vp)]
cudart.cudaStreamBeginCapture.argtypes = [vp, ctypes.c_int]
cudart.cudaStreamEndCapture.argtypes = [vp, ctypes.POINTER(vp)]
cudart.cudaGraphGetNodes.argtypes = [vp, ctypes.POINTER(vp), ctypes.POINTER(ctypes.c_size_t)]
cudart.cudaGraphNodeGetType.argtypes = [vp, ctypes.POINTER(ctypes.c_int)]
cudart.cudaGraphDestroy.argtypes = [vp]

ck("cudaSetDevice", cudart.cudaSetDevice(0))
uid = UniqueId()
ck("ncclGetUniqueId", nccl.ncclGetUniqueId(ctypes.byref(uid)))
comm = vp()
ck("ncclCommInitRank", nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0))
stream = vp()
ck("cudaStreamCreate", cudart.cudaStreamCreate(ctypes.byref(stream)))
version = ctypes.c_int()
nccl.ncclGetVersion(ctypes.byref(version))
print(json.dumps({"nccl_version": version.value}), flush=True)

MAX_PAIRS = int(os.environ.get("MAX_PAIRS", "400"))


def kernels_for(send, recv, n, nbytes):
    """Kernel nodes of a captured group of n (send to self, recv from self) pairs of nbytes each."""
    ck("cudaStreamBeginCapture", cudart.cudaStreamBeginCapture(stream, 2))  # relaxed
    ck("ncclGroupStart", nccl.ncclGroupStart())
    for i in range(n):
        ck("ncclSend", nccl.ncclSend(vp(send.value + i * nbytes), nbytes, 0, 0, comm, stream))
        ck("ncclRecv", nccl.ncclRecv(vp(recv.value + i * nbytes), nbytes, 0, 0, comm, stream))
    ck("ncclGroupEnd", nccl.ncclGroupEnd())
    graph = vp()
    ck("cudaStreamEndCapture", cudart.cudaStreamEndCapture(stream, ctypes.byref(graph)))
    count = ctypes.c_size_t(0)
    ck("cudaGraphGetNodes", cudart.cudaGraphGetNodes(graph, None, ctypes.byref(count)))
    nodes = (vp * count.value)()
    ck("cudaGraphGetNodes", cudart.cudaGraphGetNodes(graph, nodes, ctypes.byref(count)))
    kernels = 0
    for node in nodes:
        t = ctypes.c_int()
        ck("cudaGraphNodeGetType", cudart.cudaGraphNodeGetType(node, ctypes.byref(t)))
        kernels += t.value == 0  # cudaGraphNodeTypeKernel
    cudart.cudaGraphDestroy(graph)
    return kernels


# For each message size: the group sizes (in pairs) at which one more kernel plan appears, up to MAX_PAIRS pairs.
for nbytes in (4, 1 << 10, 16 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 4 << 20, 16 << 20):
    send, recv = vp(), vp()
    ck("cudaMalloc", cudart.cudaMalloc(ctypes.byref(send), MAX_PAIRS * nbytes))
    ck("cudaMalloc", cudart.cudaMalloc(ctypes.byref(recv), MAX_PAIRS * nbytes))
    steps, last = [], 0
    for n in range(1, MAX_PAIRS + 1):
        k = kernels_for(send, recv, n, nbytes)
        if k != last:
            steps.append([n, k])
            last = k
    print(json.dumps({"bytes": nbytes, "max_pairs": MAX_PAIRS, "first_pairs_with_kernels": steps}), flush=True)
    cudart.cudaFree(send)
    cudart.cudaFree(recv)
