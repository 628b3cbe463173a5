/*
 * onnxc_onnxifi.h: onnxc's C interface to its backends, after the ONNXIFI proposal
 * (docs/proposals/0003-ONNXIFIproposal.md) and its released header (onnx/onnxifi.h).
 *
 * What: the proposal's entry points (backend discovery and information, compatibility, backend
 * and graph initialization, graph I/O, asynchronous runs with events), implemented by
 * libonnxc_onnxifi.so, which embeds the Python interpreter and onnxc (every backend onnxc
 * discovers, vendor plug-ins included, is a backend here).
 * Why its own header: the function names, argument lists, types and constants are those of the
 * released onnxifi.h (ABI-compatible: a framework written against it links with this library),
 * but onnxc does not ship or depend on that header. onnxc's Python side reads the constants
 * below from this file (one source of truth).
 *
 * Handles: every onnxBackendID, onnxBackend, onnxGraph and onnxEvent points to an object whose
 * first field is a per-library, per-kind magic number; the library keeps a registry of the
 * handles it issued and checks each handle against it and its magic before use, so a stale,
 * foreign or garbage handle is an error code (ONNXIFI_STATUS_INVALID_*), never a crash.
 * onnxBackend objects are reference counted: each graph holds a reference to its backend.
 */
#ifndef ONNXC_ONNXIFI_H
#define ONNXC_ONNXIFI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void* onnxBackendID;
typedef void* onnxBackend;
typedef void* onnxGraph;
typedef void* onnxEvent;
typedef int32_t onnxStatus;
typedef int32_t onnxBackendInfo;
typedef int32_t onnxEventState;
typedef uint64_t onnxEnum;
typedef uint64_t onnxPointer;
typedef uint64_t onnxBitfield;

/* Status codes (values of the released header). */
#define ONNXIFI_STATUS_SUCCESS 0x0000
#define ONNXIFI_STATUS_FALLBACK 0x0001
#define ONNXIFI_STATUS_INVALID_ID 0x0101
#define ONNXIFI_STATUS_INVALID_SIZE 0x0102
#define ONNXIFI_STATUS_INVALID_POINTER 0x0103
#define ONNXIFI_STATUS_INVALID_PROTOBUF 0x0104
#define ONNXIFI_STATUS_INVALID_MODEL 0x0105
#define ONNXIFI_STATUS_INVALID_BACKEND 0x0106
#define ONNXIFI_STATUS_INVALID_GRAPH 0x0107
#define ONNXIFI_STATUS_INVALID_EVENT 0x0108
#define ONNXIFI_STATUS_INVALID_STATE 0x0109
#define ONNXIFI_STATUS_INVALID_NAME 0x010A
#define ONNXIFI_STATUS_INVALID_SHAPE 0x010B
#define ONNXIFI_STATUS_INVALID_DATATYPE 0x010C
#define ONNXIFI_STATUS_INVALID_MEMORY_TYPE 0x010D
#define ONNXIFI_STATUS_INVALID_PROPERTY 0x010E
#define ONNXIFI_STATUS_UNSUPPORTED_TAG 0x0201
#define ONNXIFI_STATUS_UNSUPPORTED_VERSION 0x0202
#define ONNXIFI_STATUS_UNSUPPORTED_OPERATOR 0x0203
#define ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE 0x0204
#define ONNXIFI_STATUS_UNSUPPORTED_SHAPE 0x0205
#define ONNXIFI_STATUS_UNSUPPORTED_DATATYPE 0x0206
#define ONNXIFI_STATUS_UNSUPPORTED_MEMORY_TYPE 0x0207
#define ONNXIFI_STATUS_UNSUPPORTED_FUSION_TYPE 0x0208
#define ONNXIFI_STATUS_UNSUPPORTED_PROPERTY 0x0209
#define ONNXIFI_STATUS_UNIDENTIFIED_NAME 0x0301
#define ONNXIFI_STATUS_MISMATCHING_SHAPE 0x0302
#define ONNXIFI_STATUS_MISMATCHING_DATATYPE 0x0303
#define ONNXIFI_STATUS_NO_SYSTEM_MEMORY 0x0401
#define ONNXIFI_STATUS_NO_DEVICE_MEMORY 0x0402
#define ONNXIFI_STATUS_NO_SYSTEM_RESOURCES 0x0403
#define ONNXIFI_STATUS_NO_DEVICE_RESOURCES 0x0404
#define ONNXIFI_STATUS_BACKEND_UNAVAILABLE 0x0405
#define ONNXIFI_STATUS_INTERNAL_ERROR 0x0406

/* Event states. */
#define ONNXIFI_EVENT_STATE_INVALID 0
#define ONNXIFI_EVENT_STATE_NONSIGNALLED 0x16BD
#define ONNXIFI_EVENT_STATE_SIGNALLED 0x3395

/* onnxGetBackendInfo queries answered here: strings (NUL-terminated char arrays) or uint64_t values;
 * other queries of the released header answer ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE. */
#define ONNXIFI_BACKEND_ONNXIFI_VERSION 0 /* uint64_t: major << 32 | minor */
#define ONNXIFI_BACKEND_NAME 1 /* string */
#define ONNXIFI_BACKEND_VENDOR 2 /* string */
#define ONNXIFI_BACKEND_VERSION 3 /* string */
#define ONNXIFI_BACKEND_EXTENSIONS 4 /* string, space-separated */
#define ONNXIFI_BACKEND_DEVICE 5 /* string */
#define ONNXIFI_BACKEND_DEVICE_TYPE 6 /* onnxEnum: ONNXIFI_DEVICE_TYPE_* */
#define ONNXIFI_BACKEND_ONNX_IR_VERSION 7 /* string */
#define ONNXIFI_BACKEND_OPSET_VERSION 8 /* string */
#define ONNXIFI_BACKEND_MEMORY_SIZE 20 /* uint64_t bytes */
#define ONNXIFI_BACKEND_MACS_FP32 30 /* uint64_t MACs/s */
#define ONNXIFI_BACKEND_MACS_FP16 31 /* uint64_t MACs/s */
#define ONNXIFI_BACKEND_MEMORY_BANDWIDTH 35 /* uint64_t bytes/s */
#define ONNXIFI_BACKEND_CPU_MEMORY_READ_BANDWIDTH 36 /* uint64_t bytes/s, host -> device */
#define ONNXIFI_BACKEND_CPU_MEMORY_WRITE_BANDWIDTH 37 /* uint64_t bytes/s, device -> host */

/* Device types. */
#define ONNXIFI_DEVICE_TYPE_NPU 0x01
#define ONNXIFI_DEVICE_TYPE_DSP 0x02
#define ONNXIFI_DEVICE_TYPE_GPU 0x04
#define ONNXIFI_DEVICE_TYPE_CPU 0x08
#define ONNXIFI_DEVICE_TYPE_FPGA 0x10
#define ONNXIFI_DEVICE_TYPE_HETEROGENEOUS 0x20

/* Data types (the values of ONNX's TensorProto.DataType). */
#define ONNXIFI_DATATYPE_UNDEFINED 0
#define ONNXIFI_DATATYPE_FLOAT32 1
#define ONNXIFI_DATATYPE_UINT8 2
#define ONNXIFI_DATATYPE_INT8 3
#define ONNXIFI_DATATYPE_UINT16 4
#define ONNXIFI_DATATYPE_INT16 5
#define ONNXIFI_DATATYPE_INT32 6
#define ONNXIFI_DATATYPE_INT64 7
#define ONNXIFI_DATATYPE_FLOAT16 10
#define ONNXIFI_DATATYPE_FLOAT64 11
#define ONNXIFI_DATATYPE_UINT32 12
#define ONNXIFI_DATATYPE_UINT64 13
#define ONNXIFI_DATATYPE_COMPLEX64 14
#define ONNXIFI_DATATYPE_COMPLEX128 15

#define ONNXIFI_MEMORY_TYPE_CPU 0

#define ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1 0x43DFBF69
#define ONNXIFI_TAG_MEMORY_FENCE_V1 0x23E08AAB

#define ONNXIFI_SYNCHRONIZATION_EVENT 0
#define ONNXIFI_SYNCHRONIZATION_IMPLICIT 2

/* The end of an auxiliary property list (onnxInitBackend, onnxInitGraph). */
#define ONNXIFI_BACKEND_PROPERTY_NONE 0
#define ONNXIFI_GRAPH_PROPERTY_NONE 0

typedef struct onnxTensorDescriptorV1 {
  int32_t tag; /* ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1 */
  const char* name; /* the ONNX input/output name */
  onnxEnum dataType; /* ONNXIFI_DATATYPE_* */
  onnxEnum memoryType; /* ONNXIFI_MEMORY_TYPE_CPU */
  uint32_t dimensions;
  const uint64_t* shape;
  onnxPointer buffer; /* address of dense row-major data */
} onnxTensorDescriptorV1;

typedef struct onnxMemoryFenceV1 {
  int32_t tag; /* ONNXIFI_TAG_MEMORY_FENCE_V1 */
  onnxEnum type; /* ONNXIFI_SYNCHRONIZATION_EVENT or _IMPLICIT */
  union {
    onnxEvent event;
  };
} onnxMemoryFenceV1;

/* Discovery: with backendIDs NULL (or too small), *numBackends gets the count and the call
 * returns ONNXIFI_STATUS_FALLBACK; otherwise the IDs are written and *numBackends set. */
onnxStatus onnxGetBackendIDs(onnxBackendID* backendIDs, size_t* numBackends);
onnxStatus onnxReleaseBackendID(onnxBackendID backendID);
/* The proposal's original spelling of the count query (kept for frameworks that use it). */
onnxStatus onnxGetNumBackends(size_t* numBackends);
/* With infoValue NULL or *infoValueSize too small: the size needed and ONNXIFI_STATUS_FALLBACK. */
onnxStatus onnxGetBackendInfo(onnxBackendID backendID, onnxBackendInfo infoType, void* infoValue, size_t* infoValueSize);
/* SUCCESS: supported; FALLBACK: partially supported; UNSUPPORTED_*: not supported. */
onnxStatus onnxGetBackendCompatibility(onnxBackendID backendID, size_t onnxModelSize, const void* onnxModel);
onnxStatus onnxInitBackend(onnxBackendID backendID, const uint64_t* auxPropertiesList, onnxBackend* backend);
onnxStatus onnxReleaseBackend(onnxBackend backend);
onnxStatus onnxInitEvent(onnxBackend backend, onnxEvent* event);
onnxStatus onnxSignalEvent(onnxEvent event);
onnxStatus onnxGetEventState(onnxEvent event, onnxEventState* state);
onnxStatus onnxWaitEvent(onnxEvent event);
onnxStatus onnxReleaseEvent(onnxEvent event);
onnxStatus onnxInitGraph(onnxBackend backend, const uint64_t* auxPropertiesList, size_t onnxModelSize, const void* onnxModel,
                         uint32_t weightsCount, const onnxTensorDescriptorV1* weightDescriptors, onnxGraph* graph);
onnxStatus onnxSetGraphIO(onnxGraph graph, uint32_t inputsCount, const onnxTensorDescriptorV1* inputDescriptors,
                          uint32_t outputsCount, const onnxTensorDescriptorV1* outputDescriptors);
/* Starts the run and returns; outputFence->event (type EVENT) is created here and signalled when
 * the outputs are written (wait with onnxWaitEvent, then onnxReleaseEvent). An EVENT input fence
 * is waited for before the run starts. */
onnxStatus onnxRunGraph(onnxGraph graph, const onnxMemoryFenceV1* inputFence, onnxMemoryFenceV1* outputFence);
onnxStatus onnxReleaseGraph(onnxGraph graph);

/* onnxc extension: the message of the last failing call on this thread ("" when none). */
const char* onnxcGetLastErrorMessage(void);

#ifdef __cplusplus
}
#endif

#endif /* ONNXC_ONNXIFI_H */
