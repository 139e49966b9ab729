/* Guarded reads out of shards' memory maps: rows gathered with a fused integer cast, and the
 * CRC-32C of byte ranges. Python's wrapper is roxxel/format/mapread.py.
 *
 * Why native code: gathering rows from the map with the cast on the way saves the kernel's
 * copy out of the page cache that a pread makes, and the staging buffer's second pass (see
 * bench/stream.py). A file read through a memory map that is cut short after mapping answers
 * a read beyond its new end with SIGBUS (so does an I/O error or a stale NFS handle), which
 * Python cannot catch. Every read here runs under a per-thread guard: a SIGBUS raised inside
 * it jumps back (siglongjmp) and the call reports which source faulted; the caller then
 * reads the same bytes with pread, which names the problem (a truncated shard, a storage
 * error). A SIGBUS outside a guard goes to the handler that was there before (Python's
 * faulthandler, or the default action).
 *
 * The GIL is released while bytes move. The CRC is Google's crc32c library's public C
 * function crc32c_extend (crc32c/crc32c.h), found in the copy the google-crc32c wheel loads
 * (set_crc32c): no second implementation of the checksum.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <sys/mman.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>

typedef uint32_t (*crc32c_extend_fn)(uint32_t crc, const uint8_t *data, size_t count);

static crc32c_extend_fn crc32c_extend;
static struct sigaction previous; /* the SIGBUS action before ours */
static __thread sigjmp_buf *guard __attribute__((tls_model("initial-exec")));
static __thread int handing_on __attribute__((tls_model("initial-exec"))); /* inside `previous` */

static void on_sigbus(int sig, siginfo_t *info, void *context) {
  if (guard != NULL) {
    siglongjmp(*guard, 1);
  }
  if (handing_on) { /* the handler before ours called ours back: end it with the default action */
    signal(SIGBUS, SIG_DFL);
    return;
  }
  handing_on = 1;
  if ((previous.sa_flags & SA_SIGINFO) && previous.sa_sigaction != NULL) {
    previous.sa_sigaction(sig, info, context);
  } else if (!(previous.sa_flags & SA_SIGINFO) && previous.sa_handler != SIG_DFL &&
             previous.sa_handler != SIG_IGN) {
    previous.sa_handler(sig);
  } else {
    signal(SIGBUS, SIG_DFL); /* returning re-runs the faulting access: the default action ends the process */
  }
  handing_on = 0;
  /* A handler that re-raised the signal (faulthandler enabled after us raises it to its own
   * previous handler: ours) wants the default action; the raised SIGBUS waits, blocked, until
   * we return. One that recovered (and raised nothing) keeps its turn for the next fault. */
  sigset_t pending;
  if (sigpending(&pending) == 0 && sigismember(&pending, SIGBUS)) {
    signal(SIGBUS, SIG_DFL);
  }
}

/* Install on_sigbus unless it is the handler now (someone, e.g. faulthandler.enable(), may have
 * replaced it since): called with the GIL held, before each guarded read. */
static int ensure_handler(void) {
  struct sigaction now;
  if (sigaction(SIGBUS, NULL, &now) != 0) {
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  if ((now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigbus) {
    return 0;
  }
  struct sigaction ours;
  memset(&ours, 0, sizeof ours);
  ours.sa_sigaction = on_sigbus;
  ours.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&ours.sa_mask);
  previous = now;
  if (sigaction(SIGBUS, &ours, NULL) != 0) {
    PyErr_SetFromErrno(PyExc_OSError);
    return -1;
  }
  return 0;
}

#define PREFETCH_LINES 16

/* One loop per (source, destination) type pair: the compiler vectorises the widening casts. */
#define GATHER(NAME, SRC, DST)                                                              \
  static void NAME(char *out, const int64_t *sources, Py_ssize_t n, Py_ssize_t count,      \
                   volatile Py_ssize_t *row, int64_t *max) {                              \
    SRC top = 0;                                                                          \
    for (Py_ssize_t r = 0; r < n; r++) {                                                  \
      *row = r;                                                                           \
      const SRC *src = (const SRC *)(uintptr_t)sources[r];                                \
      if (r + 1 < n) { /* start the next row's first lines (and page walk) coming */      \
        const char *next = (const char *)(uintptr_t)sources[r + 1];                       \
        for (int line = 0; line < PREFETCH_LINES; line++) __builtin_prefetch(next + 64 * line); \
      }                                                                                   \
      DST *dst = (DST *)out + r * count;                                                  \
      SRC m = r ? top : src[0];                                                           \
      for (Py_ssize_t t = 0; t < count; t++) {                                            \
        SRC v = src[t];                                                                   \
        dst[t] = (DST)v;                                                                  \
        m = v > m ? v : m;                                                                \
      }                                                                                   \
      top = m;                                                                            \
    }                                                                                     \
    *max = (int64_t)top;                                                                  \
  }

GATHER(gather_u16_i32, uint16_t, int32_t)
GATHER(gather_u16_i64, uint16_t, int64_t)
GATHER(gather_u16_u16, uint16_t, uint16_t)
GATHER(gather_u16_u32, uint16_t, uint32_t)
GATHER(gather_u32_i32, uint32_t, int32_t)
GATHER(gather_u32_i64, uint32_t, int64_t)
GATHER(gather_u32_u32, uint32_t, uint32_t)
GATHER(gather_i32_i32, int32_t, int32_t)
GATHER(gather_i32_i64, int32_t, int64_t)

typedef void (*gather_fn)(char *, const int64_t *, Py_ssize_t, Py_ssize_t, volatile Py_ssize_t *, int64_t *);

static const struct {
  char src, dst;
  gather_fn fn;
  int src_size, dst_size;
} GATHERS[] = {
    {'H', 'i', gather_u16_i32, 2, 4}, {'H', 'q', gather_u16_i64, 2, 8}, {'H', 'H', gather_u16_u16, 2, 2},
    {'H', 'I', gather_u16_u32, 2, 4}, {'I', 'i', gather_u32_i32, 4, 4}, {'I', 'q', gather_u32_i64, 4, 8},
    {'I', 'I', gather_u32_u32, 4, 4}, {'i', 'i', gather_i32_i32, 4, 4}, {'i', 'q', gather_i32_i64, 4, 8},
};

static PyObject *gather(PyObject *self, PyObject *args) {
  Py_buffer out, sources;
  int src_code, dst_code;
  Py_ssize_t count;
  if (!PyArg_ParseTuple(args, "w*y*CCn", &out, &sources, &src_code, &dst_code, &count)) {
    return NULL;
  }
  PyObject *result = NULL;
  gather_fn fn = NULL;
  int dst_size = 0;
  for (size_t k = 0; k < sizeof GATHERS / sizeof GATHERS[0]; k++) {
    if (GATHERS[k].src == src_code && GATHERS[k].dst == dst_code) {
      fn = GATHERS[k].fn;
      dst_size = GATHERS[k].dst_size;
    }
  }
  Py_ssize_t n = sources.len / (Py_ssize_t)sizeof(int64_t);
  if (fn == NULL) {
    PyErr_Format(PyExc_ValueError, "no gather from type code %c to %c", src_code, dst_code);
  } else if (count < 1 || count > PY_SSIZE_T_MAX / dst_size || sources.len % (Py_ssize_t)sizeof(int64_t) ||
             (n > 0 && count * dst_size > PY_SSIZE_T_MAX / n) || out.len != n * count * dst_size) {
    PyErr_SetString(PyExc_ValueError, "out must hold len(sources) rows of count tokens");
  } else if (ensure_handler() == 0) {
    volatile Py_ssize_t row = 0;
    int64_t max = 0;
    int faulted = 0;
    sigjmp_buf env;
    Py_BEGIN_ALLOW_THREADS
    if (n > 0) {
      if (sigsetjmp(env, 1) == 0) {
        guard = &env;
        fn((char *)out.buf, (const int64_t *)sources.buf, n, count, &row, &max);
      } else {
        faulted = 1;
      }
      guard = NULL;
    }
    Py_END_ALLOW_THREADS
    result = faulted ? Py_BuildValue("(nO)", (Py_ssize_t)row, Py_None) : Py_BuildValue("(OL)", Py_None, (long long)max);
  }
  PyBuffer_Release(&out);
  PyBuffer_Release(&sources);
  return result;
}

static PyObject *crc32c(PyObject *self, PyObject *args) {
  Py_buffer out, sources, lengths, done = {0};
  if (!PyArg_ParseTuple(args, "w*y*y*|w*", &out, &sources, &lengths, &done)) {
    return NULL;
  }
  PyObject *result = NULL;
  Py_ssize_t n = sources.len / (Py_ssize_t)sizeof(int64_t);
  if (crc32c_extend == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "set_crc32c was not called: no CRC-32C function");
  } else if (sources.len % (Py_ssize_t)sizeof(int64_t) || lengths.len != sources.len ||
             out.len != n * (Py_ssize_t)sizeof(uint32_t) || (done.buf != NULL && done.len != sizeof(int64_t))) {
    PyErr_SetString(PyExc_ValueError,
                    "sources and lengths must be int64 and out uint32, one each per range; done one int64");
  } else if (ensure_handler() == 0) {
    volatile Py_ssize_t k = 0;
    int faulted = 0;
    sigjmp_buf env;
    const int64_t *at = sources.buf, *len = lengths.buf;
    uint32_t *crcs = out.buf;
    int64_t *progress = done.buf;
    Py_BEGIN_ALLOW_THREADS
    if (n > 0) {
      if (sigsetjmp(env, 1) == 0) {
        guard = &env;
        for (k = 0; k < n; k++) {
          crcs[k] = crc32c_extend(0, (const uint8_t *)(uintptr_t)at[k], (size_t)len[k]);
          if (progress != NULL) {
            __atomic_store_n(progress, (int64_t)(k + 1), __ATOMIC_RELEASE); /* crcs[:k + 1] are set */
          }
        }
      } else {
        faulted = 1;
      }
      guard = NULL;
    }
    Py_END_ALLOW_THREADS
    result = faulted ? PyLong_FromSsize_t(k) : Py_NewRef(Py_None);
  }
  PyBuffer_Release(&out);
  PyBuffer_Release(&sources);
  PyBuffer_Release(&lengths);
  if (done.buf != NULL) {
    PyBuffer_Release(&done);
  }
  return result;
}

/* A read-only shared mapping of a whole file that holds no file descriptor (Python's mmap keeps
 * a duplicate open for each map: thousands of shards would be thousands of descriptors). */
typedef struct {
  void *address;
  size_t length;
} Mapping;

static void unmap(PyObject *capsule) {
  Mapping *m = PyCapsule_GetPointer(capsule, "roxxel.mapping");
  if (m != NULL) {
    munmap(m->address, m->length);
    PyMem_Free(m);
  }
}

static PyObject *map_file(PyObject *self, PyObject *args) {
  int fd;
  Py_ssize_t length;
  if (!PyArg_ParseTuple(args, "in", &fd, &length)) {
    return NULL;
  }
  if (length < 1) {
    PyErr_SetString(PyExc_ValueError, "cannot map an empty file");
    return NULL;
  }
  void *address = mmap(NULL, (size_t)length, PROT_READ, MAP_SHARED, fd, 0);
  if (address == MAP_FAILED) {
    return PyErr_SetFromErrno(PyExc_OSError);
  }
  Mapping *m = PyMem_Malloc(sizeof *m);
  if (m == NULL) {
    munmap(address, (size_t)length);
    return PyErr_NoMemory();
  }
  m->address = address;
  m->length = (size_t)length;
  PyObject *capsule = PyCapsule_New(m, "roxxel.mapping", unmap);
  if (capsule == NULL) {
    munmap(address, (size_t)length);
    PyMem_Free(m);
  }
  return capsule;
}

static PyObject *mapping_address(PyObject *self, PyObject *capsule) {
  Mapping *m = PyCapsule_GetPointer(capsule, "roxxel.mapping");
  return m == NULL ? NULL : PyLong_FromVoidPtr(m->address);
}

static PyObject *release(PyObject *self, PyObject *capsule) {
  Mapping *m = PyCapsule_GetPointer(capsule, "roxxel.mapping");
  if (m == NULL) {
    return NULL;
  }
  if (madvise(m->address, m->length, MADV_DONTNEED) != 0) {
    return PyErr_SetFromErrno(PyExc_OSError);
  }
  Py_RETURN_NONE;
}

static PyObject *progress(PyObject *self, PyObject *arg) {
  Py_buffer done;
  if (PyObject_GetBuffer(arg, &done, PyBUF_SIMPLE) != 0) {
    return NULL;
  }
  if (done.len != sizeof(int64_t)) {
    PyBuffer_Release(&done);
    PyErr_SetString(PyExc_ValueError, "done must be one int64");
    return NULL;
  }
  /* acquire: the checksums stored before this count (release, in crc32c) are seen as written */
  int64_t k = __atomic_load_n((int64_t *)done.buf, __ATOMIC_ACQUIRE);
  PyBuffer_Release(&done);
  return PyLong_FromLongLong((long long)k);
}

/* The address of an object's buffer (a numpy array's first element): a tenth of the cost of
 * reading numpy's __array_interface__ dict, for the aligned batch each step allocates. */
static PyObject *address(PyObject *self, PyObject *obj) {
  Py_buffer view;
  if (PyObject_GetBuffer(obj, &view, PyBUF_STRIDES) != 0) { /* (no format asked: bfloat16 has no buffer format) */
    return NULL;
  }
  PyObject *result = PyLong_FromVoidPtr(view.buf);
  PyBuffer_Release(&view);
  return result;
}

static PyObject *set_crc32c(PyObject *self, PyObject *args) {
  const char *path;
  if (!PyArg_ParseTuple(args, "s", &path)) {
    return NULL;
  }
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == NULL) {
    lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  }
  void *fn = lib == NULL ? NULL : dlsym(lib, "crc32c_extend");
  if (fn == NULL) {
    const char *why = dlerror();
    PyErr_Format(PyExc_OSError, "%s: no crc32c_extend (%s)", path, why ? why : "not found");
    return NULL;
  }
  crc32c_extend = (crc32c_extend_fn)fn; /* the library stays loaded: no dlclose */
  Py_RETURN_NONE;
}

static PyMethodDef METHODS[] = {
    {"gather", gather, METH_VARARGS,
     "gather(out, sources, src_code, dst_code, count) -> (faulted_row, max)\n\n"
     "Copy count tokens of type src_code from each address in sources (int64 buffer) into\n"
     "row r of out (writable, len(sources) * count tokens of type dst_code), cast on the way.\n"
     "Type codes are the struct module's: H, I, i (sources), H, I, i, q (out). Returns\n"
     "(None, the largest token copied) or, when a read raised SIGBUS, (the faulting row, None)."},
    {"crc32c", crc32c, METH_VARARGS,
     "crc32c(out, sources, lengths[, done]) -> faulted_range or None\n\n"
     "out[k] (uint32) = the CRC-32C of lengths[k] bytes at address sources[k] (int64 buffers);\n"
     "when a read raised SIGBUS, the index of that range (out from there on is not set).\n"
     "done (one writable int64), if given, is set to k + 1 once out[k] is (for another thread)."},
    {"map_file", map_file, METH_VARARGS,
     "map_file(fd, length) -> mapping: a read-only shared map of the file's first length bytes that\n"
     "holds no descriptor (fd may be closed after); unmapped when the mapping is freed."},
    {"mapping_address", mapping_address, METH_O, "mapping_address(mapping) -> the address of its first byte"},
    {"release", release, METH_O, "release(mapping): madvise(MADV_DONTNEED) over the whole mapping"},
    {"address", address, METH_O, "address(array) -> the address of its buffer's first byte"},
    {"progress", progress, METH_O, "progress(done) -> done[0], read with acquire ordering (see crc32c)"},
    {"set_crc32c", set_crc32c, METH_VARARGS,
     "set_crc32c(path): take crc32c_extend from the crc32c shared library at path."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_mapread", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__mapread(void) { return PyModule_Create(&MODULE); }
