"""CUDA's ordering rules, once: for every call the course's recorder writes (include/calltrace.cpp), the runtime and
driver names recorded under it, which argument is its stream, whether it puts work on a stream, and whether and when
it makes the host wait. The record's happens-before order (calls.py), the reading of a lab's source
(labchecks/streams.py) and the source test of a call named (labchecks/common.never_named) all read it, and a test
holds it to the recorder's wrappers (tests/test_ordering.py).

A driver call and its runtime twin are one kind of event: cuMemAllocAsync is recorded as cudaMallocAsync (with
"api": "driver" and "as": "cuMemAllocAsync"). The rules are the CUDA Programming Guide's (§15.3 API Fundamentals for
the stream-ordered allocator; the runtime API reference's stream and event semantics, which the driver API shares).
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Rule:
    call: str  # the name the record writes
    names: dict  # each runtime name recorded as `call` -> its driver twins (base names, as a program writes them)
    stream: int | None = None  # the stream's argument in each of `names` and their twins (-1: the last); None: none,
    #                            or a kernel's (its launch configuration)
    ptr: int | None = None  # the pointer (or graph) argument the reading of the source follows
    enqueues: str = ""  # "stream": GPU work on its stream; "legacy": on the legacy default stream whatever it is given
    waits: str = ""  # the host waits: "always", "on success" (a query that answered cudaSuccess: the work was done),
    #                  "host to device or device to host, on success" (cudaMemcpy: not device to device, nor
    #                  cudaMemcpyDefault, whose direction the record does not give), "for cudaMalloc memory" (cudaFree)
    waits_for: str = ""  # what the host then waits for: "stream", "event", "device"


RULES = (
    Rule("cudaStreamCreate", {"cudaStreamCreate": ("cuStreamCreate",), "cudaStreamCreateWithFlags": ("cuStreamCreate",),
                              "cudaStreamCreateWithPriority": ("cuStreamCreateWithPriority",)}),
    Rule("cudaStreamDestroy", {"cudaStreamDestroy": ("cuStreamDestroy",)}, stream=0),
    Rule("cudaStreamSynchronize", {"cudaStreamSynchronize": ("cuStreamSynchronize",)}, stream=0, waits="always",
         waits_for="stream"),
    Rule("cudaStreamQuery", {"cudaStreamQuery": ("cuStreamQuery",)}, stream=0, waits="on success", waits_for="stream"),
    Rule("cudaStreamWaitEvent", {"cudaStreamWaitEvent": ("cuStreamWaitEvent",)}, stream=0),
    Rule("cudaStreamBeginCapture", {"cudaStreamBeginCapture": ("cuStreamBeginCapture",),
                                    "cudaStreamBeginCaptureToGraph": ("cuStreamBeginCaptureToGraph",)}, stream=0),
    Rule("cudaStreamEndCapture", {"cudaStreamEndCapture": ("cuStreamEndCapture",)}, stream=0),
    Rule("cudaEventCreate", {"cudaEventCreate": ("cuEventCreate",), "cudaEventCreateWithFlags": ("cuEventCreate",)}),
    Rule("cudaEventDestroy", {"cudaEventDestroy": ("cuEventDestroy",)}),
    Rule("cudaEventRecord", {"cudaEventRecord": ("cuEventRecord",), "cudaEventRecordWithFlags": ("cuEventRecordWithFlags",)},
         stream=1, enqueues="stream"),
    Rule("cudaEventSynchronize", {"cudaEventSynchronize": ("cuEventSynchronize",)}, waits="always", waits_for="event"),
    Rule("cudaEventQuery", {"cudaEventQuery": ("cuEventQuery",)}, waits="on success", waits_for="event"),
    Rule("cudaIpcGetEventHandle", {"cudaIpcGetEventHandle": ("cuIpcGetEventHandle",)}),
    Rule("cudaIpcOpenEventHandle", {"cudaIpcOpenEventHandle": ("cuIpcOpenEventHandle",)}),
    Rule("cudaDeviceSynchronize", {"cudaDeviceSynchronize": ("cuCtxSynchronize",)}, waits="always", waits_for="device"),
    Rule("cudaLaunchHostFunc", {"cudaLaunchHostFunc": ("cuLaunchHostFunc",)}, stream=0, enqueues="stream"),
    Rule("cudaMalloc", {"cudaMalloc": ("cuMemAlloc",)}, ptr=0),
    Rule("cudaFree", {"cudaFree": ("cuMemFree",)}, ptr=0, waits="for cudaMalloc memory", waits_for="device"),
    Rule("cudaMallocAsync", {"cudaMallocAsync": ("cuMemAllocAsync",), "cudaMallocFromPoolAsync": ("cuMemAllocFromPoolAsync",)},
         stream=-1, ptr=0, enqueues="stream"),
    Rule("cudaFreeAsync", {"cudaFreeAsync": ("cuMemFreeAsync",)}, stream=-1, ptr=0, enqueues="stream"),
    Rule("cudaMemcpy", {"cudaMemcpy": ("cuMemcpy", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemcpyDtoD")}, ptr=0,
         enqueues="legacy", waits="host to device or device to host, on success", waits_for="stream"),  # the legacy one: not every stream
    Rule("cudaMemcpyAsync", {"cudaMemcpyAsync": ("cuMemcpyAsync", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync",
                                                 "cuMemcpyDtoDAsync")}, stream=-1, ptr=0, enqueues="stream"),
    Rule("cudaMemset", {"cudaMemset": ("cuMemsetD8", "cuMemsetD16", "cuMemsetD32")}, ptr=0, enqueues="legacy"),
    Rule("cudaMemsetAsync", {"cudaMemsetAsync": ("cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async")}, stream=-1,
         ptr=0, enqueues="stream"),
    Rule("cudaMemPoolSetAttribute", {"cudaMemPoolSetAttribute": ("cuMemPoolSetAttribute",)}),
    Rule("cudaMemPoolGetAttribute", {"cudaMemPoolGetAttribute": ("cuMemPoolGetAttribute",)}),
    Rule("cudaMemPoolTrimTo", {"cudaMemPoolTrimTo": ("cuMemPoolTrimTo",)}),
    Rule("cudaDeviceGetDefaultMemPool", {"cudaDeviceGetDefaultMemPool": ("cuDeviceGetDefaultMemPool",)}),
    Rule("cudaDeviceGetMemPool", {"cudaDeviceGetMemPool": ("cuDeviceGetMemPool",)}),
    Rule("cudaDeviceSetMemPool", {"cudaDeviceSetMemPool": ("cuDeviceSetMemPool",)}),
    Rule("cudaMemPoolCreate", {"cudaMemPoolCreate": ("cuMemPoolCreate",)}),
    Rule("cudaMemPoolDestroy", {"cudaMemPoolDestroy": ("cuMemPoolDestroy",)}),
    Rule("cudaMemPoolImportPointer", {"cudaMemPoolImportPointer": ("cuMemPoolImportPointer",)}),
    Rule("cudaMemPoolExportPointer", {"cudaMemPoolExportPointer": ("cuMemPoolExportPointer",)}),
    Rule("cudaLaunchKernel", {"cudaLaunchKernel": ("cuLaunchKernel",), "cudaLaunchKernelExC": ("cuLaunchKernelEx",)},
         enqueues="stream"),
    Rule("cudaGraphInstantiate", {"cudaGraphInstantiate": ("cuGraphInstantiate",),
                                  "cudaGraphInstantiateWithFlags": ("cuGraphInstantiateWithFlags",),
                                  "cudaGraphInstantiateWithParams": ("cuGraphInstantiateWithParams",)}),
    Rule("cudaGraphUpload", {"cudaGraphUpload": ("cuGraphUpload",)}, stream=-1, ptr=0, enqueues="stream"),
    Rule("cudaGraphLaunch", {"cudaGraphLaunch": ("cuGraphLaunch",)}, stream=-1, ptr=0, enqueues="stream"),
    Rule("cudaGraphExecDestroy", {"cudaGraphExecDestroy": ("cuGraphExecDestroy",)}),
    Rule("cudaDeviceGraphMemTrim", {"cudaDeviceGraphMemTrim": ("cuDeviceGraphMemTrim",)}),
)
RULE = {r.call: r for r in RULES}
SECTION = "section"  # not CUDA calls: the harness's mark (course::section), and the last line of a process that ended
END = "end"  #         with exit() (nothing of its record is missing up to it): the recorder's other lines

# Pool attributes whose value is 64 bits (cuuint64_t); the others (the reuse policies) are int. The recorder reads
# these as 64-bit (calltrace.cpp, attr_value; a test holds the two lists together). cudaMemPoolAttrMaxPoolSize is
# declared by CUDA 13.3's headers, not 13.0's: the recorder reads it where it is built with headers that have it.
POOL_ATTRS_64 = ("cudaMemPoolAttrReleaseThreshold", "cudaMemPoolAttrReservedMemCurrent", "cudaMemPoolAttrReservedMemHigh",
                 "cudaMemPoolAttrUsedMemCurrent", "cudaMemPoolAttrUsedMemHigh", "cudaMemPoolAttrMaxPoolSize")


def recorded(**kw) -> tuple:
    """The recorded calls whose rule has these values (recorded(enqueues="stream"), recorded(waits="always"))."""
    return tuple(r.call for r in RULES if all(getattr(r, k) == v for k, v in kw.items()))


def written(call: str) -> dict:
    """Every name a program writes for `call` (its runtime names and their driver twins) -> the runtime name it is."""
    out = {}
    for runtime, twins in RULE[call].names.items():
        out[runtime] = runtime
        for d in twins:
            out.setdefault(d, runtime)
    return out


def driver_twins(name: str) -> tuple:
    """The driver calls that do what the runtime call `name` does (cuMemAllocAsync for cudaMallocAsync); () if none."""
    return next((r.names[name] for r in RULES if name in r.names), ())


def rule_of(name: str) -> Rule | None:
    """The rule of a name as written (a runtime name or a driver twin)."""
    return next((r for r in RULES if name in written(r.call)), None)


DRIVER = {d: runtime for r in RULES for d, runtime in written(r.call).items() if d.startswith("cu") and
          not d.startswith("cuda")}  # each driver name -> the runtime name it twins
