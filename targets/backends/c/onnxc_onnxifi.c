/*
 * libonnxc_onnxifi.so: the ONNXIFI entry points of onnxc_onnxifi.h over onnxc's backends.
 *
 * What: a thin C layer that owns the handles and forwards every call to
 * onnxc.targets.backends.cabi in an embedded Python interpreter (started on the first call, as
 * the proposal recommends for library initialization; when the caller is itself a Python
 * process the running interpreter is used). Build it with `python -m onnxc.targets.backends.cbuild`.
 *
 * Handles: each object starts with a magic number of this library and its kind; every handle
 * given out is kept in a registry, and a call checks that the handle is in the registry before
 * reading it, then checks the magic: stale (released), foreign or garbage handles are reported
 * as ONNXIFI_STATUS_INVALID_{ID,BACKEND,GRAPH,EVENT}, never dereferenced. Backends are reference
 * counted (onnxInitBackend gives one reference, each graph takes one, onnxReleaseBackend and
 * onnxReleaseGraph drop theirs; the last one releases the backend in onnxc).
 *
 * Which Python: $ONNXC_PYTHON (a python executable of an environment where onnxc is installed,
 * e.g. a virtualenv's bin/python), else the one that built the library (ONNXC_DEFAULT_PYTHON).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnxc_onnxifi.h"

#ifndef ONNXC_DEFAULT_PYTHON
#define ONNXC_DEFAULT_PYTHON "python3"
#endif

/* "ONX" + kind: unique to this library, different per kind (as the proposal asks). */
#define MAGIC_ID 0x4F4E5849u
#define MAGIC_BACKEND 0x4F4E5842u
#define MAGIC_GRAPH 0x4F4E5847u
#define MAGIC_EVENT 0x4F4E5845u

struct backend_id {
  uint32_t magic;
  int index;
};

struct backend {
  uint32_t magic;
  uint64_t refs;
  int index;
};

struct graph {
  uint32_t magic;
  struct backend* backend;
  long id; /* cabi's graph id */
};

enum { EVENT_USER, EVENT_RUN };

struct event {
  uint32_t magic;
  int kind;
  long run; /* EVENT_RUN: cabi's run id */
  int signalled;
  pthread_mutex_t mutex;
  pthread_cond_t cond;
};

/* ------------------------------------------------------------------------ errors, registry */

static __thread char last_error[2048];

static onnxStatus fail(onnxStatus status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return status;
}

const char* onnxcGetLastErrorMessage(void) { return last_error; }

static pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
static void** registry = NULL;
static size_t registry_size = 0, registry_capacity = 0;

static int registry_add(void* p) {
  pthread_mutex_lock(&registry_mutex);
  if (registry_size == registry_capacity) {
    size_t cap = registry_capacity ? 2 * registry_capacity : 64;
    void** grown = realloc(registry, cap * sizeof *grown);
    if (!grown) {
      pthread_mutex_unlock(&registry_mutex);
      return 0;
    }
    registry = grown;
    registry_capacity = cap;
  }
  registry[registry_size++] = p;
  pthread_mutex_unlock(&registry_mutex);
  return 1;
}

static void registry_remove(void* p) {
  pthread_mutex_lock(&registry_mutex);
  for (size_t i = 0; i < registry_size; ++i) {
    if (registry[i] == p) {
      registry[i] = registry[--registry_size];
      break;
    }
  }
  pthread_mutex_unlock(&registry_mutex);
}

/* Whether `p` is a live handle of this library with `magic` (read only once known to be ours). */
static int registry_check(const void* p, uint32_t magic) {
  int found = 0;
  if (!p) return 0;
  pthread_mutex_lock(&registry_mutex);
  for (size_t i = 0; i < registry_size; ++i) {
    if (registry[i] == p) {
      found = *(const uint32_t*)p == magic;
      break;
    }
  }
  pthread_mutex_unlock(&registry_mutex);
  return found;
}

/* ----------------------------------------------------------------------------- Python side */

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static PyObject* cabi = NULL; /* onnxc.targets.backends.cabi */
static char init_error[2048] = "";
static struct backend_id* ids = NULL;
static size_t id_count = 0;

static void format_python_error(char* out, size_t size) {
  PyObject *type, *value, *trace;
  PyErr_Fetch(&type, &value, &trace);
  PyObject* text = value ? PyObject_Str(value) : NULL;
  snprintf(out, size, "%s", text && PyUnicode_Check(text) ? PyUnicode_AsUTF8(text) : "unknown Python error");
  Py_XDECREF(text);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(trace);
}

static void library_init(void) {
  int started_here = 0;
  if (!Py_IsInitialized()) {
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    const char* python = getenv("ONNXC_PYTHON");
    PyStatus st = PyConfig_SetBytesString(&config, &config.program_name, python && *python ? python : ONNXC_DEFAULT_PYTHON);
    if (!PyStatus_Exception(st)) st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st)) {
      snprintf(init_error, sizeof init_error, "starting Python failed: %s", st.err_msg ? st.err_msg : "?");
      return;
    }
    started_here = 1;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  cabi = PyImport_ImportModule("onnxc.targets.backends.cabi");
  if (!cabi) {
    char why[1536];
    format_python_error(why, sizeof why);
    snprintf(init_error, sizeof init_error, "importing onnxc failed: %s", why);
  } else {
    PyObject* r = PyObject_CallMethod(cabi, "discover", NULL);
    long status = -1, count = 0;
    const char* msg = "";
    if (r && PyArg_ParseTuple(r, "lsl", &status, &msg, &count) && status == ONNXIFI_STATUS_SUCCESS) {
      ids = calloc(count ? (size_t)count : 1, sizeof *ids);
      for (long i = 0; ids && i < count; ++i) {
        ids[i].magic = MAGIC_ID;
        ids[i].index = (int)i;
        registry_add(&ids[i]);
      }
      id_count = ids ? (size_t)count : 0;
    } else {
      if (PyErr_Occurred()) format_python_error(init_error, sizeof init_error);
      else snprintf(init_error, sizeof init_error, "backend discovery failed: %s", msg);
    }
    Py_XDECREF(r);
  }
  PyGILState_Release(gil);
  /* The interpreter was started by this library on this thread, which holds the GIL: release
   * it, so that onnxc's worker threads run between calls and other threads can call in. */
  if (started_here) PyEval_SaveThread();
}

static onnxStatus ensure_init(void) {
  pthread_once(&init_once, library_init);
  if (!cabi || init_error[0]) return fail(ONNXIFI_STATUS_BACKEND_UNAVAILABLE, "%s", init_error[0] ? init_error : "onnxc is not available");
  return ONNXIFI_STATUS_SUCCESS;
}

/* Call cabi.<fn>(args): returns the status of the result tuple (its message becomes the last
 * error), and the tuple itself in *result (a new reference) when asked. The GIL must be held. */
static onnxStatus call(PyObject** result, const char* fn, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject* args = Py_VaBuildValue(fmt, ap);
  va_end(ap);
  if (!args) {
    char why[1536];
    format_python_error(why, sizeof why);
    return fail(ONNXIFI_STATUS_INTERNAL_ERROR, "%s: building the arguments failed: %s", fn, why);
  }
  if (!PyTuple_Check(args)) {
    PyObject* one = PyTuple_Pack(1, args);
    Py_DECREF(args);
    args = one;
  }
  PyObject* f = PyObject_GetAttrString(cabi, fn);
  PyObject* r = f ? PyObject_CallObject(f, args) : NULL;
  Py_XDECREF(f);
  Py_DECREF(args);
  if (!r || !PyTuple_Check(r) || PyTuple_Size(r) < 2) {
    char why[1536] = "not a (status, message) tuple";
    if (PyErr_Occurred()) format_python_error(why, sizeof why);
    Py_XDECREF(r);
    return fail(ONNXIFI_STATUS_INTERNAL_ERROR, "%s: %s", fn, why);
  }
  onnxStatus status = (onnxStatus)PyLong_AsLong(PyTuple_GetItem(r, 0));
  const char* msg = PyUnicode_AsUTF8(PyTuple_GetItem(r, 1));
  if (status != ONNXIFI_STATUS_SUCCESS) fail(status, "%s", msg ? msg : "");
  else last_error[0] = '\0';
  if (result) *result = r;
  else Py_DECREF(r);
  return status;
}

/* A Python list of (name, data type, shape, address) for `count` descriptors, or NULL with
 * the status in *status (tags, memory types and pointers checked here). GIL held. */
static PyObject* descriptors(uint32_t count, const onnxTensorDescriptorV1* d, onnxStatus* status) {
  if (count && !d) {
    *status = fail(ONNXIFI_STATUS_INVALID_POINTER, "NULL tensor descriptors for %u tensor(s)", count);
    return NULL;
  }
  PyObject* list = PyList_New(0);
  for (uint32_t i = 0; list && i < count; ++i) {
    if (d[i].tag != ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1) {
      *status = fail(ONNXIFI_STATUS_UNSUPPORTED_TAG, "tensor descriptor %u: tag 0x%X is not ONNXIFI_TAG_TENSOR_DESCRIPTOR_V1", i, (unsigned)d[i].tag);
    } else if (!d[i].name) {
      *status = fail(ONNXIFI_STATUS_INVALID_NAME, "tensor descriptor %u has no name", i);
    } else if (d[i].memoryType != ONNXIFI_MEMORY_TYPE_CPU) {
      *status = fail(ONNXIFI_STATUS_INVALID_MEMORY_TYPE, "tensor '%s': only ONNXIFI_MEMORY_TYPE_CPU buffers are supported", d[i].name);
    } else if (d[i].dimensions && !d[i].shape) {
      *status = fail(ONNXIFI_STATUS_INVALID_SHAPE, "tensor '%s': NULL shape for %u dimensions", d[i].name, d[i].dimensions);
    } else {
      PyObject* shape = PyTuple_New(d[i].dimensions);
      for (uint32_t k = 0; k < d[i].dimensions; ++k) PyTuple_SET_ITEM(shape, k, PyLong_FromUnsignedLongLong(d[i].shape[k]));
      PyObject* item = Py_BuildValue("(sKNK)", d[i].name, (unsigned long long)d[i].dataType, shape, (unsigned long long)d[i].buffer);
      PyList_Append(list, item);
      Py_XDECREF(item);
      continue;
    }
    Py_DECREF(list);
    return NULL;
  }
  return list;
}

/* ------------------------------------------------------------------------------- discovery */

onnxStatus onnxGetBackendIDs(onnxBackendID* backendIDs, size_t* numBackends) {
  if (!numBackends) return fail(ONNXIFI_STATUS_INVALID_POINTER, "numBackends is NULL");
  onnxStatus st = ensure_init();
  if (st != ONNXIFI_STATUS_SUCCESS) return st;
  size_t room = *numBackends;
  *numBackends = id_count;
  if (!backendIDs || room < id_count) return ONNXIFI_STATUS_FALLBACK;
  for (size_t i = 0; i < id_count; ++i) backendIDs[i] = &ids[i];
  return ONNXIFI_STATUS_SUCCESS;
}

onnxStatus onnxGetNumBackends(size_t* numBackends) {
  if (!numBackends) return fail(ONNXIFI_STATUS_INVALID_POINTER, "numBackends is NULL");
  onnxStatus st = ensure_init();
  if (st != ONNXIFI_STATUS_SUCCESS) return st;
  *numBackends = id_count;
  return ONNXIFI_STATUS_SUCCESS;
}

onnxStatus onnxReleaseBackendID(onnxBackendID backendID) {
  /* IDs are the library's, valid until the process ends: releasing one is a checked no-op. */
  if (ensure_init() != ONNXIFI_STATUS_SUCCESS) return ONNXIFI_STATUS_BACKEND_UNAVAILABLE;
  if (!registry_check(backendID, MAGIC_ID)) return fail(ONNXIFI_STATUS_INVALID_ID, "not a backend ID of this library");
  return ONNXIFI_STATUS_SUCCESS;
}

static onnxStatus check_id(onnxBackendID id, int* index) {
  onnxStatus st = ensure_init();
  if (st != ONNXIFI_STATUS_SUCCESS) return st;
  if (!registry_check(id, MAGIC_ID)) return fail(ONNXIFI_STATUS_INVALID_ID, "not a backend ID of this library");
  *index = ((struct backend_id*)id)->index;
  return ONNXIFI_STATUS_SUCCESS;
}

onnxStatus onnxGetBackendInfo(onnxBackendID backendID, onnxBackendInfo infoType, void* infoValue, size_t* infoValueSize) {
  int index = -1;
  onnxStatus st = check_id(backendID, &index);
  if (st != ONNXIFI_STATUS_SUCCESS) return st;
  if (!infoValueSize) return fail(ONNXIFI_STATUS_INVALID_POINTER, "infoValueSize is NULL");
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* r = NULL;
  st = call(&r, "info", "(ii)", index, (int)infoType);
  if (st == ONNXIFI_STATUS_SUCCESS) {
    long kind = PyLong_AsLong(PyTuple_GetItem(r, 2));
    PyObject* value = PyTuple_GetItem(r, 3);
    size_t room = *infoValueSize;
    if (kind == 0) {
      char* text;
      Py_ssize_t length;
      PyBytes_AsStringAndSize(value, &text, &length);
      *infoValueSize = (size_t)length + 1;
      if (!infoValue || room < (size_t)length + 1) st = ONNXIFI_STATUS_FALLBACK;
      else memcpy(infoValue, text, (size_t)length + 1);
    } else {
      uint64_t number = PyLong_AsUnsignedLongLong(value);
      *infoValueSize = sizeof number;
      if (!infoValue || room < sizeof number) st = ONNXIFI_STATUS_FALLBACK;
      else memcpy(infoValue, &number, sizeof number);
    }
  }
  Py_XDECREF(r);
  PyGILState_Release(gil);
  return st;
}

onnxStatus onnxGetBackendCompatibility(onnxBackendID backendID, size_t onnxModelSize, const void* onnxModel) {
  int index = -1;
  onnxStatus st = check_id(backendID, &index);
  if (st != ONNXIFI_STATUS_SUCCESS) return st;
  if (!onnxModel) return fail(ONNXIFI_STATUS_INVALID_POINTER, "onnxModel is NULL");
  if (!onnxModelSize) return fail(ONNXIFI_STATUS_INVALID_SIZE, "onnxModelSize is 0");
  PyGILState_STATE gil = PyGILState_Ensure();
  st = call(NULL, "compatibility", "(iy#)", index, (const char*)onnxModel, (Py_ssize_t)onnxModelSize);
  PyGILState_Release(gil);
  return st;
}

/* --------------------------------------------------------------------------------- backends */

onnxStatus onnxInitBackend(onnxBackendID backendID, const uint64_t* auxPropertiesList, onnxBackend* backend) {
  int index = -1;
  onnxStatus st = check_id(backendID, &index);
  if (st != ONNXIFI_STATUS_SUCCESS) return st;
  if (!backend) return fail(ONNXIFI_STATUS_INVALID_POINTER, "backend is NULL");
  if (auxPropertiesList && auxPropertiesList[0] != ONNXIFI_BACKEND_PROPERTY_NONE)
    return fail(ONNXIFI_STATUS_UNSUPPORTED_PROPERTY, "backend property %llu is not supported", (unsigned long long)auxPropertiesList[0]);
  struct backend* b = calloc(1, sizeof *b);
  if (!b) return fail(ONNXIFI_STATUS_NO_SYSTEM_MEMORY, "out of memory");
  PyGILState_STATE gil = PyGILState_Ensure();
  st = call(NULL, "init_backend", "(i)", index);
  PyGILState_Release(gil);
  if (st != ONNXIFI_STATUS_SUCCESS || !registry_add(b)) {
    free(b);
    return st != ONNXIFI_STATUS_SUCCESS ? st : fail(ONNXIFI_STATUS_NO_SYSTEM_MEMORY, "out of memory");
  }
  b->magic = MAGIC_BACKEND;
  b->refs = 1;
  b->index = index;
  *backend = b;
  return ONNXIFI_STATUS_SUCCESS;
}

/* Drop one reference; the last one releases the backend in onnxc and frees the handle. */
static onnxStatus backend_unref(struct backend* b) {
  pthread_mutex_lock(&registry_mutex);
  uint64_t left = --b->refs;
  pthread_mutex_unlock(&registry_mutex);
  if (left) return ONNXIFI_STATUS_SUCCESS;
  registry_remove(b);
  b->magic = 0;
  PyGILState_STATE gil = PyGILState_Ensure();
  onnxStatus st = call(NULL, "release_backend", "(i)", b->index);
  PyGILState_Release(gil);
  free(b);
  return st;
}

onnxStatus onnxReleaseBackend(onnxBackend backend) {
  if (ensure_init() != ONNXIFI_STATUS_SUCCESS) return ONNXIFI_STATUS_BACKEND_UNAVAILABLE;
  if (!registry_check(backend, MAGIC_BACKEND)) return fail(ONNXIFI_STATUS_INVALID_BACKEND, "not a live backend of this library");
  return backend_unref((struct backend*)backend);
}

/* ----------------------------------------------------------------------------------- events */

static struct event* new_event(int kind, long run) {
  struct event* e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->kind = kind;
  e->run = run;
  pthread_mutex_init(&e->mutex, NULL);
  pthread_cond_init(&e->cond, NULL);
  if (!registry_add(e)) {
    free(e);
    return NULL;
  }
  e->magic = MAGIC_EVENT;
  return e;
}

onnxStatus onnxInitEvent(onnxBackend backend, onnxEvent* event) {
  if (ensure_init() != ONNXIFI_STATUS_SUCCESS) return ONNXIFI_STATUS_BACKEND_UNAVAILABLE;
  if (!registry_check(backend, MAGIC_BACKEND)) return fail(ONNXIFI_STATUS_INVALID_BACKEND, "not a live backend of this library");
  if (!event) return fail(ONNXIFI_STATUS_INVALID_POINTER, "event is NULL");
  struct event* e = new_event(EVENT_USER, 0);
  if (!e) return fail(ONNXIFI_STATUS_NO_SYSTEM_MEMORY, "out of memory");
  *event = e;
  return ONNXIFI_STATUS_SUCCESS;
}

onnxStatus onnxSignalEvent(onnxEvent event) {
  if (!registry_check(event, MAGIC_EVENT)) return fail(ONNXIFI_STATUS_INVALID_EVENT, "not a live event of this library");
  struct event* e = event;
  if (e->kind != EVENT_USER) return fail(ONNXIFI_STATUS_INVALID_STATE, "a run's output event is signalled by the run, not by the caller");
  pthread_mutex_lock(&e->mutex);
  int was = e->signalled;
  e->signalled = 1;
  pthread_cond_broadcast(&e->cond);
  pthread_mutex_unlock(&e->mutex);
  return was ? fail(ONNXIFI_STATUS_INVALID_STATE, "the event was already signalled") : ONNXIFI_STATUS_SUCCESS;
}

onnxStatus onnxGetEventState(onnxEvent event, onnxEventState* state) {
  if (!state) return fail(ONNXIFI_STATUS_INVALID_POINTER, "state is NULL");
  if (!registry_check(event, MAGIC_EVENT)) {
    *state = ONNXIFI_EVENT_STATE_INVALID;
    return fail(ONNXIFI_STATUS_INVALID_EVENT, "not a live event of this library");
  }
  struct event* e = event;
  int done = e->signalled;
  if (!done && e->kind == EVENT_RUN) {
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject* r = NULL;
    onnxStatus st = call(&r, "run_done", "(l)", e->run);
    if (st == ONNXIFI_STATUS_SUCCESS) done = (int)PyLong_AsLong(PyTuple_GetItem(r, 2));
    Py_XDECREF(r);
    PyGILState_Release(gil);
    if (st != ONNXIFI_STATUS_SUCCESS) return st;
  }
  *state = done ? ONNXIFI_EVENT_STATE_SIGNALLED : ONNXIFI_EVENT_STATE_NONSIGNALLED;
  return ONNXIFI_STATUS_SUCCESS;
}

onnxStatus onnxWaitEvent(onnxEvent event) {
  if (!registry_check(event, MAGIC_EVENT)) return fail(ONNXIFI_STATUS_INVALID_EVENT, "not a live event of this library");
  struct event* e = event;
  if (e->kind == EVENT_USER) {
    pthread_mutex_lock(&e->mutex);
    while (!e->signalled) pthread_cond_wait(&e->cond, &e->mutex);
    pthread_mutex_unlock(&e->mutex);
    return ONNXIFI_STATUS_SUCCESS;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  onnxStatus st = call(NULL, "run_wait", "(l)", e->run); /* the run's own error, if it failed */
  PyGILState_Release(gil);
  e->signalled = 1;
  return st;
}

onnxStatus onnxReleaseEvent(onnxEvent event) {
  if (!registry_check(event, MAGIC_EVENT)) return fail(ONNXIFI_STATUS_INVALID_EVENT, "not a live event of this library");
  struct event* e = event;
  registry_remove(e);
  e->magic = 0;
  if (e->kind == EVENT_RUN) {
    PyGILState_STATE gil = PyGILState_Ensure();
    call(NULL, "run_release", "(l)", e->run);
    PyGILState_Release(gil);
  }
  pthread_mutex_destroy(&e->mutex);
  pthread_cond_destroy(&e->cond);
  free(e);
  return ONNXIFI_STATUS_SUCCESS;
}

/* ----------------------------------------------------------------------------------- graphs */

onnxStatus onnxInitGraph(onnxBackend backend, const uint64_t* auxPropertiesList, size_t onnxModelSize, const void* onnxModel,
                         uint32_t weightsCount, const onnxTensorDescriptorV1* weightDescriptors, onnxGraph* graph) {
  if (ensure_init() != ONNXIFI_STATUS_SUCCESS) return ONNXIFI_STATUS_BACKEND_UNAVAILABLE;
  if (!registry_check(backend, MAGIC_BACKEND)) return fail(ONNXIFI_STATUS_INVALID_BACKEND, "not a live backend of this library");
  if (!graph || !onnxModel) return fail(ONNXIFI_STATUS_INVALID_POINTER, "%s is NULL", graph ? "onnxModel" : "graph");
  if (!onnxModelSize) return fail(ONNXIFI_STATUS_INVALID_SIZE, "onnxModelSize is 0");
  if (auxPropertiesList && auxPropertiesList[0] != ONNXIFI_GRAPH_PROPERTY_NONE)
    return fail(ONNXIFI_STATUS_UNSUPPORTED_PROPERTY, "graph property %llu is not supported", (unsigned long long)auxPropertiesList[0]);
  struct backend* b = backend;
  struct graph* g = calloc(1, sizeof *g);
  if (!g) return fail(ONNXIFI_STATUS_NO_SYSTEM_MEMORY, "out of memory");
  onnxStatus st = ONNXIFI_STATUS_SUCCESS;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* weights = descriptors(weightsCount, weightDescriptors, &st);
  PyObject* r = NULL;
  if (weights) {
    st = call(&r, "init_graph", "(iy#O)", b->index, (const char*)onnxModel, (Py_ssize_t)onnxModelSize, weights);
    if (st == ONNXIFI_STATUS_SUCCESS) g->id = PyLong_AsLong(PyTuple_GetItem(r, 2));
  }
  Py_XDECREF(weights);
  Py_XDECREF(r);
  PyGILState_Release(gil);
  if (st != ONNXIFI_STATUS_SUCCESS || !registry_add(g)) {
    free(g);
    return st != ONNXIFI_STATUS_SUCCESS ? st : fail(ONNXIFI_STATUS_NO_SYSTEM_MEMORY, "out of memory");
  }
  pthread_mutex_lock(&registry_mutex);
  b->refs++; /* the graph holds its backend */
  pthread_mutex_unlock(&registry_mutex);
  g->backend = b;
  g->magic = MAGIC_GRAPH;
  *graph = g;
  return ONNXIFI_STATUS_SUCCESS;
}

onnxStatus onnxSetGraphIO(onnxGraph graph, uint32_t inputsCount, const onnxTensorDescriptorV1* inputDescriptors,
                          uint32_t outputsCount, const onnxTensorDescriptorV1* outputDescriptors) {
  if (ensure_init() != ONNXIFI_STATUS_SUCCESS) return ONNXIFI_STATUS_BACKEND_UNAVAILABLE;
  if (!registry_check(graph, MAGIC_GRAPH)) return fail(ONNXIFI_STATUS_INVALID_GRAPH, "not a live graph of this library");
  struct graph* g = graph;
  onnxStatus st = ONNXIFI_STATUS_SUCCESS;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* ins = descriptors(inputsCount, inputDescriptors, &st);
  PyObject* outs = ins ? descriptors(outputsCount, outputDescriptors, &st) : NULL;
  if (ins && outs) st = call(NULL, "set_io", "(lOO)", g->id, ins, outs);
  Py_XDECREF(ins);
  Py_XDECREF(outs);
  PyGILState_Release(gil);
  return st;
}

onnxStatus onnxRunGraph(onnxGraph graph, const onnxMemoryFenceV1* inputFence, onnxMemoryFenceV1* outputFence) {
  if (ensure_init() != ONNXIFI_STATUS_SUCCESS) return ONNXIFI_STATUS_BACKEND_UNAVAILABLE;
  if (!registry_check(graph, MAGIC_GRAPH)) return fail(ONNXIFI_STATUS_INVALID_GRAPH, "not a live graph of this library");
  if (!outputFence) return fail(ONNXIFI_STATUS_INVALID_POINTER, "outputFence is NULL");
  if (outputFence->tag != ONNXIFI_TAG_MEMORY_FENCE_V1 || (inputFence && inputFence->tag != ONNXIFI_TAG_MEMORY_FENCE_V1))
    return fail(ONNXIFI_STATUS_UNSUPPORTED_TAG, "memory fence tag is not ONNXIFI_TAG_MEMORY_FENCE_V1");
  if (outputFence->type != ONNXIFI_SYNCHRONIZATION_EVENT)
    return fail(ONNXIFI_STATUS_UNSUPPORTED_PROPERTY, "only ONNXIFI_SYNCHRONIZATION_EVENT output fences are supported");
  if (inputFence && inputFence->type == ONNXIFI_SYNCHRONIZATION_EVENT) {
    /* The inputs are ready when the input event is signalled: wait for it before starting. */
    onnxStatus st = onnxWaitEvent(inputFence->event);
    if (st != ONNXIFI_STATUS_SUCCESS) return st;
  } else if (inputFence && inputFence->type != ONNXIFI_SYNCHRONIZATION_IMPLICIT) {
    return fail(ONNXIFI_STATUS_UNSUPPORTED_PROPERTY, "input fence type %llu is not supported", (unsigned long long)inputFence->type);
  }
  struct graph* g = graph;
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* r = NULL;
  onnxStatus st = call(&r, "run", "(l)", g->id);
  long run = st == ONNXIFI_STATUS_SUCCESS ? PyLong_AsLong(PyTuple_GetItem(r, 2)) : 0;
  Py_XDECREF(r);
  PyGILState_Release(gil);
  if (st != ONNXIFI_STATUS_SUCCESS) return st;
  struct event* e = new_event(EVENT_RUN, run);
  if (!e) return fail(ONNXIFI_STATUS_NO_SYSTEM_MEMORY, "out of memory");
  outputFence->event = e;
  return ONNXIFI_STATUS_SUCCESS;
}

onnxStatus onnxReleaseGraph(onnxGraph graph) {
  if (ensure_init() != ONNXIFI_STATUS_SUCCESS) return ONNXIFI_STATUS_BACKEND_UNAVAILABLE;
  if (!registry_check(graph, MAGIC_GRAPH)) return fail(ONNXIFI_STATUS_INVALID_GRAPH, "not a live graph of this library");
  struct graph* g = graph;
  registry_remove(g);
  g->magic = 0;
  PyGILState_STATE gil = PyGILState_Ensure();
  onnxStatus st = call(NULL, "release_graph", "(l)", g->id);
  PyGILState_Release(gil);
  onnxStatus unref = backend_unref(g->backend);
  free(g);
  return st != ONNXIFI_STATUS_SUCCESS ? st : unref;
}
