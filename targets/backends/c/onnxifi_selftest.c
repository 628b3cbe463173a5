/*
 * onnxifi_selftest: a C program that uses onnxc's backends through the ONNXIFI interface only
 * (onnxc_onnxifi.h, libonnxc_onnxifi.so), as a framework written in C would; built and run by
 * test/python/test_backends.py, and a worked example of the interface.
 *
 * Usage: onnxifi_selftest BACKEND MODEL.onnx X.bin W.bin EXPECTED.bin [NODE.onnx ...]
 *   MODEL: inputs x[4,8] and w[8,8] (float32), output y[4,8]; W is given as a weight at
 *   onnxInitGraph, X at onnxSetGraphIO; EXPECTED is y computed elsewhere (raw float32).
 *
 * It prints every backend with its info, the compatibility status of each NODE model on
 * BACKEND ("compat FILE 0xSTATUS message"), runs MODEL there with an input event and an output
 * event, compares y with EXPECTED (rtol 1e-3, atol 1e-5), and checks that wrong handles,
 * descriptors and states give the documented status codes. Each check prints "ok ..." or
 * "FAIL ..."; the exit status is the number of failures (capped at 100), 0 when all passed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnxc_onnxifi.h"

static int failures = 0;

static void expect(const char* what, onnxStatus got, onnxStatus want) {
  if (got == want) {
    printf("ok %s\n", what);
  } else {
    printf("FAIL %s: status 0x%X, want 0x%X (%s)\n", what, (unsigned)got, (unsigned)want, onnxcGetLastErrorMessage());
    failures++;
  }
}

static void* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    printf("FAIL cannot open %s\n", path);
    exit(100);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* data = malloc(n ? (size_t)n : 1);
  if (!data || fread(data, 1, (size_t)n, f) != (size_t)n) {
    printf("FAIL cannot read %s\n", path);
    exit(100);
  }
  fclose(f);
  *size = (size_t)n;
  return data;
}

static onnxTensorDescriptorV1 tensor(const char* name, const uint64_t* shape, uint32_t dims, void* data) {
  onnxTensorDescriptorV1 d;
  memset(&d, 0, sizeof d);
  d.tag = ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1;
  d.name = name;
  d.dataType = ONNXIFI_DATATYPE_FLOAT32;
  d.memoryType = ONNXIFI_MEMORY_TYPE_CPU;
  d.dimensions = dims;
  d.shape = shape;
  d.buffer = (onnxPointer)(uintptr_t)data;
  return d;
}

int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: %s BACKEND MODEL.onnx X.bin W.bin EXPECTED.bin [NODE.onnx ...]\n", argv[0]);
    return 100;
  }
  const char* wanted = argv[1];

  /* Discovery: the count first (FALLBACK), then the IDs. */
  size_t count = 0;
  expect("onnxGetBackendIDs(NULL) gives the count", onnxGetBackendIDs(NULL, &count), ONNXIFI_STATUS_FALLBACK);
  onnxBackendID* ids = calloc(count ? count : 1, sizeof *ids);
  expect("onnxGetBackendIDs", onnxGetBackendIDs(ids, &count), ONNXIFI_STATUS_SUCCESS);
  onnxBackendID chosen = NULL;
  for (size_t i = 0; i < count; ++i) {
    char name[256] = "", vendor[256] = "";
    uint64_t kind = 0, macs = 0, bandwidth = 0, h2d = 0;
    size_t size = 0;
    expect("onnxGetBackendInfo(NAME, NULL) gives the size", onnxGetBackendInfo(ids[i], ONNXIFI_BACKEND_NAME, NULL, &size), ONNXIFI_STATUS_FALLBACK);
    if (size == 0 || size > sizeof name) {
      printf("FAIL name size %zu\n", size);
      failures++;
    }
    size = sizeof name;
    onnxGetBackendInfo(ids[i], ONNXIFI_BACKEND_NAME, name, &size);
    size = sizeof vendor;
    onnxGetBackendInfo(ids[i], ONNXIFI_BACKEND_VENDOR, vendor, &size);
    size = sizeof kind;
    expect("DEVICE_TYPE", onnxGetBackendInfo(ids[i], ONNXIFI_BACKEND_DEVICE_TYPE, &kind, &size), ONNXIFI_STATUS_SUCCESS);
    size = sizeof macs;
    expect("MACS_FP32", onnxGetBackendInfo(ids[i], ONNXIFI_BACKEND_MACS_FP32, &macs, &size), ONNXIFI_STATUS_SUCCESS);
    size = sizeof bandwidth;
    expect("MEMORY_BANDWIDTH", onnxGetBackendInfo(ids[i], ONNXIFI_BACKEND_MEMORY_BANDWIDTH, &bandwidth, &size), ONNXIFI_STATUS_SUCCESS);
    size = sizeof h2d;
    expect("CPU_MEMORY_READ_BANDWIDTH", onnxGetBackendInfo(ids[i], ONNXIFI_BACKEND_CPU_MEMORY_READ_BANDWIDTH, &h2d, &size), ONNXIFI_STATUS_SUCCESS);
    printf("backend %zu: name=%s vendor=%s device_type=%llu macs_fp32=%llu memory_bandwidth=%llu cpu_read_bandwidth=%llu\n", i, name, vendor,
           (unsigned long long)kind, (unsigned long long)macs, (unsigned long long)bandwidth, (unsigned long long)h2d);
    if (strcmp(name, wanted) == 0) chosen = ids[i];
  }
  if (!chosen) {
    printf("FAIL no backend named %s\n", wanted);
    return 100;
  }
  size_t size = 8;
  uint64_t dummy;
  expect("onnxGetBackendInfo on a garbage ID", onnxGetBackendInfo((onnxBackendID)(uintptr_t)0x10, ONNXIFI_BACKEND_NAME, &dummy, &size), ONNXIFI_STATUS_INVALID_ID);
  expect("unknown info query", onnxGetBackendInfo(chosen, 9999, &dummy, &size), ONNXIFI_STATUS_UNSUPPORTED_ATTRIBUTE);

  /* Compatibility, node by node. */
  for (int a = 6; a < argc; ++a) {
    size_t n;
    void* node = read_file(argv[a], &n);
    onnxStatus st = onnxGetBackendCompatibility(chosen, n, node);
    const char* base = strrchr(argv[a], '/');
    printf("compat %s 0x%X %s\n", base ? base + 1 : argv[a], (unsigned)st, st == ONNXIFI_STATUS_SUCCESS ? "" : onnxcGetLastErrorMessage());
    free(node);
  }
  expect("compatibility of bytes that are no protobuf", onnxGetBackendCompatibility(chosen, 7, "\xff\xff\xff\xffjunk"), ONNXIFI_STATUS_INVALID_PROTOBUF);

  /* Offload the model. */
  size_t model_size, x_size, w_size, e_size;
  void* model = read_file(argv[2], &model_size);
  float* x = read_file(argv[3], &x_size);
  float* w = read_file(argv[4], &w_size);
  float* expected = read_file(argv[5], &e_size);
  float y[32];
  memset(y, 0, sizeof y);
  const uint64_t x_shape[2] = {4, 8}, w_shape[2] = {8, 8}, y_shape[2] = {4, 8}, bad_shape[2] = {4, 9};
  if (x_size != sizeof(float) * 32 || w_size != sizeof(float) * 64 || e_size != sizeof y) {
    printf("FAIL input sizes\n");
    return 100;
  }

  onnxBackend backend = NULL;
  expect("onnxInitBackend", onnxInitBackend(chosen, NULL, &backend), ONNXIFI_STATUS_SUCCESS);
  onnxTensorDescriptorV1 weight = tensor("w", w_shape, 2, w);
  onnxGraph graph = NULL;
  expect("onnxInitGraph", onnxInitGraph(backend, NULL, model_size, model, 1, &weight, &graph), ONNXIFI_STATUS_SUCCESS);

  /* Wrong handles are error codes, never crashes. */
  struct {
    uint32_t magic;
    uint64_t refs;
    int index;
  } forged;
  memcpy(&forged, backend, sizeof forged); /* the right magic, but not a handle the library gave out */
  onnxGraph other = NULL;
  expect("onnxInitGraph on a forged backend", onnxInitGraph(&forged, NULL, model_size, model, 1, &weight, &other), ONNXIFI_STATUS_INVALID_BACKEND);
  expect("onnxInitGraph on a garbage pointer", onnxInitGraph((onnxBackend)(uintptr_t)0x1234, NULL, model_size, model, 1, &weight, &other),
         ONNXIFI_STATUS_INVALID_BACKEND);
  expect("onnxReleaseBackend on a graph", onnxReleaseBackend(graph), ONNXIFI_STATUS_INVALID_BACKEND);
  expect("onnxSetGraphIO on a backend", onnxSetGraphIO(backend, 0, NULL, 0, NULL), ONNXIFI_STATUS_INVALID_GRAPH);
  onnxTensorDescriptorV1 unknown_weight = tensor("nope", w_shape, 2, w);
  expect("onnxInitGraph with a weight that is no input", onnxInitGraph(backend, NULL, model_size, model, 1, &unknown_weight, &other),
         ONNXIFI_STATUS_UNIDENTIFIED_NAME);

  /* Descriptors are checked against the graph. */
  onnxTensorDescriptorV1 in = tensor("x", x_shape, 2, x), out = tensor("y", y_shape, 2, y);
  onnxTensorDescriptorV1 bad = tensor("x", bad_shape, 2, x);
  expect("onnxSetGraphIO with a wrong shape", onnxSetGraphIO(graph, 1, &bad, 1, &out), ONNXIFI_STATUS_MISMATCHING_SHAPE);
  bad = tensor("z", x_shape, 2, x);
  expect("onnxSetGraphIO with an unknown name", onnxSetGraphIO(graph, 1, &bad, 1, &out), ONNXIFI_STATUS_UNIDENTIFIED_NAME);
  bad = tensor("x", x_shape, 2, x);
  bad.dataType = ONNXIFI_DATATYPE_FLOAT64;
  expect("onnxSetGraphIO with a wrong data type", onnxSetGraphIO(graph, 1, &bad, 1, &out), ONNXIFI_STATUS_MISMATCHING_DATATYPE);
  bad = tensor("x", x_shape, 2, x);
  bad.tag = 0x1234;
  expect("onnxSetGraphIO with a wrong tag", onnxSetGraphIO(graph, 1, &bad, 1, &out), ONNXIFI_STATUS_UNSUPPORTED_TAG);
  expect("onnxSetGraphIO", onnxSetGraphIO(graph, 1, &in, 1, &out), ONNXIFI_STATUS_SUCCESS);

  /* Run: the inputs are "ready" when our input event is signalled; the output event says when y is. */
  onnxEvent ready = NULL;
  expect("onnxInitEvent", onnxInitEvent(backend, &ready), ONNXIFI_STATUS_SUCCESS);
  onnxEventState state = 0;
  expect("onnxGetEventState", onnxGetEventState(ready, &state), ONNXIFI_STATUS_SUCCESS);
  expect("a new event is not signalled", state == ONNXIFI_EVENT_STATE_NONSIGNALLED ? 0 : 1, 0);
  expect("onnxSignalEvent", onnxSignalEvent(ready), ONNXIFI_STATUS_SUCCESS);
  expect("onnxSignalEvent twice", onnxSignalEvent(ready), ONNXIFI_STATUS_INVALID_STATE);
  onnxMemoryFenceV1 input_fence = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {ready}};
  onnxMemoryFenceV1 output_fence = {ONNXIFI_TAG_MEMORY_FENCE_V1, ONNXIFI_SYNCHRONIZATION_EVENT, {NULL}};
  expect("onnxRunGraph", onnxRunGraph(graph, &input_fence, &output_fence), ONNXIFI_STATUS_SUCCESS);
  expect("signalling a run's event", onnxSignalEvent(output_fence.event), ONNXIFI_STATUS_INVALID_STATE);
  expect("onnxWaitEvent", onnxWaitEvent(output_fence.event), ONNXIFI_STATUS_SUCCESS);
  expect("onnxGetEventState after the run", onnxGetEventState(output_fence.event, &state), ONNXIFI_STATUS_SUCCESS);
  expect("the output event is signalled", state == ONNXIFI_EVENT_STATE_SIGNALLED ? 0 : 1, 0);
  double worst = 0.0;
  int close = 1;
  for (int i = 0; i < 32; ++i) {
    double diff = fabs((double)y[i] - (double)expected[i]);
    if (diff > worst) worst = diff;
    if (!(diff <= 1e-5 + 1e-3 * fabs((double)expected[i]))) close = 0;
  }
  printf("max_abs_diff %g\n", worst);
  expect("outputs equal the expected ones", close ? 0 : 1, 0);
  expect("onnxReleaseEvent (output)", onnxReleaseEvent(output_fence.event), ONNXIFI_STATUS_SUCCESS);
  expect("onnxReleaseEvent (input)", onnxReleaseEvent(ready), ONNXIFI_STATUS_SUCCESS);
  expect("onnxWaitEvent on a released event", onnxWaitEvent(ready), ONNXIFI_STATUS_INVALID_EVENT);

  /* Lifetimes: the graph holds the backend; released handles are invalid afterwards. */
  expect("onnxReleaseBackend (the graph keeps it alive)", onnxReleaseBackend(backend), ONNXIFI_STATUS_SUCCESS);
  expect("onnxSetGraphIO after the backend's release", onnxSetGraphIO(graph, 1, &in, 1, &out), ONNXIFI_STATUS_SUCCESS);
  expect("onnxReleaseGraph", onnxReleaseGraph(graph), ONNXIFI_STATUS_SUCCESS);
  expect("onnxReleaseGraph twice", onnxReleaseGraph(graph), ONNXIFI_STATUS_INVALID_GRAPH);
  expect("onnxReleaseBackend after the last reference went", onnxReleaseBackend(backend), ONNXIFI_STATUS_INVALID_BACKEND);
  expect("onnxReleaseBackendID", onnxReleaseBackendID(chosen), ONNXIFI_STATUS_SUCCESS);

  free(model);
  free(x);
  free(w);
  free(expected);
  free(ids);
  printf("%d failure(s)\n", failures);
  return failures > 100 ? 100 : failures;
}
