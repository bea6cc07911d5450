/*
 * posenc._posenc - the hot path of the Python binding: the in-place calls of
 * libposenc (RoPE and its serving variants, ALiBi/T5 score biases, the
 * absolute embeddings) from Python objects to pe_tensor descriptors in C,
 * the kernel run with the GIL released.
 *
 * Arrays are read, without a copy, through
 *   - the buffer protocol for numpy arrays (float32 'f', float16 'e',
 *     uint16 'H' read as bfloat16 when the caller asks for it; int64 for
 *     positions), which also says whether the array is writable;
 *   - torch.Tensor's own accessors for torch tensors (data_ptr, shape,
 *     stride, dtype, is_cpu; requires_grad for tensors written and the lazy
 *     negation bit, which DLPack could not carry): float32, float16 and
 *     bfloat16 on the CPU;
 *   - DLPack (__dlpack__(), kDLFloat 32/16, kDLBfloat 16, CPU) for any other
 *     object that speaks it.
 * Anything else, and anything these paths refuse (a read-only array to be
 * written, a dtype or shape that does not fit, an odd stride), is handed to
 * the binding's Python helper for that argument (posenc._arrays), which
 * either raises the TypeError/ValueError the binding has always raised or
 * describes the object (ml_dtypes bfloat16, a list of positions) - so every
 * check and message of the Python layer holds, and the common case never
 * leaves C.
 *
 * The library is not linked: posenc._lib loads it (its search order,
 * POSENC_LIBRARY first) and hands this module the address of each function
 * (_bind), so both always use the same copy. A function the loaded library
 * does not export is left NULL and reported by posenc._lib.fn when called.
 *
 * Each entry point returns None; with a repetition count (timed()), it runs
 * the C call that many times on the same descriptors and returns the
 * nanoseconds it took: what posenc.bench compares a Python call with.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "posenc.h"

/* ---- DLPack (the v0.x ABI every producer exports as "dltensor") ---------- */

typedef struct { int32_t device_type, device_id; } DLDevice;
typedef struct { uint8_t code, bits; uint16_t lanes; } DLDataType;
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_CPU = 1 };

/* ---- the library's functions, set by _bind ------------------------------- */

#define PE_FUNCTIONS(X)                                                        \
  X(pe_last_error) X(pe_apply_rope_qk) X(pe_rope_shift_k) X(pe_rope_rerotate_k) \
  X(pe_apply_rope_qk_multi) X(pe_apply_mrope_qk) X(pe_apply_rope_qk_store)     \
  X(pe_qk_norm_init) X(pe_kv_cache_init) X(pe_qk_norm_rope)                    \
  X(pe_qk_norm_rope_store) X(pe_alibi_add_bias) X(pe_t5_add_bias)              \
  X(pe_sinusoidal_add) X(pe_learned_add)

static struct {
#define X(name) __typeof__(name) *name;
  PE_FUNCTIONS(X)
#undef X
} F;

/* Python objects the module works with, set by _bind: the classes whose
 * handles it reads, the exceptions, and the helpers of posenc._arrays that
 * take an argument the fast paths do not. */
static struct {
  PyObject *ndarray, *RopeCache, *ThreadPool, *PosencError, *BusyError;
  PyObject *tensor, *int64_grid, *mrope_positions, *int32_vector, *float_vector,
      *float_table, *weight, *handle_of, *requested, *missing, *layout_error;
} G;

static PyObject *S_ptr, *S_requires_grad, *S_is_neg, *S_t, *S_dlpack, *S_torch, *S_ndim;

/* ---- errors --------------------------------------------------------------- */

/* A function the loaded library does not export: posenc._lib.missing's
 * PosencError(UNSUPPORTED). */
static int need(void *f, const char *name) {
  if (f)
    return 0;
  PyObject *e = PyObject_CallFunction(G.missing, "s", name);
  if (e) {
    PyErr_SetObject((PyObject *)Py_TYPE(e), e);
    Py_DECREF(e);
  }
  return -1;
}

static PyObject *raise_status(pe_status st) {
  const char *msg = F.pe_last_error ? F.pe_last_error() : "";
  PyObject *cls = st == PE_ERR_BUSY ? G.BusyError : G.PosencError;
  PyObject *e = PyObject_CallFunction(cls, "is", (int)st, msg);
  if (e) {
    PyErr_SetObject(cls, e);
    Py_DECREF(e);
  }
  return NULL;
}

/* ---- handles -------------------------------------------------------------- */

/* The C object of a posenc object of class cls (None -> NULL when
 * optional); anything else (a closed object, another type) goes through
 * posenc._arrays.handle_of for its error. */
static int handle(PyObject *obj, PyObject *cls, const char *name, int optional, void **out) {
  *out = NULL;
  if (obj == Py_None && optional)
    return 0;
  if (cls && PyObject_TypeCheck(obj, (PyTypeObject *)cls)) {
    PyObject *p = PyObject_GetAttr(obj, S_ptr);
    if (!p)
      return -1;
    if (PyLong_Check(p)) {
      *out = PyLong_AsVoidPtr(p);
      Py_DECREF(p);
      return PyErr_Occurred() ? -1 : 0;
    }
    Py_DECREF(p);
  }
  PyObject *r = PyObject_CallFunction(G.handle_of, "OOs", obj, cls ? cls : Py_None, name);
  Py_XDECREF(r);
  if (!PyErr_Occurred())
    PyErr_Format(PyExc_TypeError, "%s: not a usable posenc object", name);
  return -1;
}

/* ---- tensors -------------------------------------------------------------- */

enum { SRC_NONE, SRC_BUFFER, SRC_CAPSULE, SRC_VIEW, SRC_TORCH /* nothing held */ };

/* How an object of fewer dimensions maps onto [d0, d1, d2, d3]. */
enum {
  MAP_4D,   /* [B, H, T, D] as is */
  MAP_SLOTS /* [S, H, D] -> [1, H, S, D]: a flat KV cache (or 4-D as is) */,
  MAP_ROWS  /* [B, T, D] -> [B, 1, T, D] (or 4-D as is) */,
  MAP_TABLE /* [L, D] -> [1, 1, L, D] (or 4-D as is) */
};

typedef struct {
  pe_tensor t;
  int src;
  Py_buffer buf;
  PyObject *ref; /* the DLPack capsule, or the View of the Python helper */
} targ;

static void targ_release(targ *a) {
  if (a->src == SRC_BUFFER)
    PyBuffer_Release(&a->buf);
  Py_CLEAR(a->ref);
  a->src = SRC_NONE;
}

/* The requested dtype (None -> -1) through posenc._arrays._requested. */
static int requested(PyObject *dtype, int *out) {
  *out = -1;
  if (dtype == Py_None)
    return 0;
  PyObject *r = PyObject_CallOneArg(G.requested, dtype);
  if (!r)
    return -1;
  *out = (int)PyLong_AsLong(r);
  Py_DECREF(r);
  return PyErr_Occurred() ? -1 : 0;
}

/* Shape and element strides of ndim dims (byte strides bs) into
 * shape/stride as the binding always read them: a dimension of extent 1 is
 * never stepped over, so its stride is free; the last must be contiguous.
 * 0 on success, 1 when the Python helper must decide. */
static int elem_strides(int ndim, const Py_ssize_t *shape, const Py_ssize_t *bs, int size,
                        int64_t *sh, int64_t *st) {
  for (int i = 0; i < ndim; i++) {
    sh[i] = shape[i];
    if (shape[i] == 1) {
      st[i] = i == ndim - 1 ? 1 : (bs[i] % size == 0 ? bs[i] / size : 0);
      continue;
    }
    if (bs[i] % size)
      return 1;
    st[i] = bs[i] / size;
  }
  return st[ndim - 1] == 1 ? 0 : 1;
}

/* [ndim dims] -> the 4-D descriptor, per map. 0, or 1 (not this map's). */
static int map4(int map, int ndim, const int64_t *sh, const int64_t *st, pe_tensor *t) {
  static const int8_t order[4][4] = {
      {0, 1, 2, 3},   /* 4-D */
      {-1, 1, 0, 2},  /* slots: [S, H, D] -> [1, H, S, D] */
      {0, -1, 1, 2},  /* rows: [B, T, D] -> [B, 1, T, D] */
      {-1, -1, 0, 1}, /* table: [L, D] -> [1, 1, L, D] */
  };
  int want = map == MAP_SLOTS || map == MAP_ROWS ? 3 : map == MAP_TABLE ? 2 : 4;
  if (ndim != 4 && ndim != want)
    return 1;
  const int8_t *o = order[ndim == 4 ? 0 : map];
  for (int i = 0; i < 4; i++) {
    t->shape[i] = o[i] < 0 ? 1 : sh[o[i]];
    t->stride[i] = o[i] < 0 ? 0 : st[o[i]];
  }
  return 0;
}

static int pe_of_format(const char *f, Py_ssize_t itemsize, int want) {
  if (f[0] == '@' || f[0] == '=' || f[0] == '<')
    f++; /* native little-endian: every target of this module */
  if (f[1] != '\0')
    return -1;
  if (f[0] == 'f' && itemsize == 4)
    return PE_F32;
  if (f[0] == 'e' && itemsize == 2)
    return PE_F16;
  if (f[0] == 'H' && itemsize == 2 && want == PE_BF16)
    return PE_BF16;
  return -1;
}

/* numpy through the buffer protocol. 0 ok, 1 for the helper, -1 error. */
static int from_buffer(PyObject *obj, int want, int writable, int map, targ *a) {
  int flags = PyBUF_RECORDS_RO | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, &a->buf, flags) < 0) {
    PyErr_Clear(); /* read-only, or no buffer for this dtype: the helper says why */
    return 1;
  }
  a->src = SRC_BUFFER;
  Py_buffer *b = &a->buf;
  int dt = b->format ? pe_of_format(b->format, b->itemsize, want) : -1;
  int64_t sh[4], st[4];
  if (dt < 0 || (want >= 0 && want != dt) || b->ndim < 2 || b->ndim > 4 ||
      (uintptr_t)b->buf % (uintptr_t)b->itemsize ||
      elem_strides(b->ndim, b->shape, b->strides, (int)b->itemsize, sh, st) ||
      map4(map, b->ndim, sh, st, &a->t)) {
    targ_release(a);
    return 1;
  }
  a->t.data = b->buf;
  a->t.dtype = (pe_dtype)dt;
  return 0;
}

/* A DLPack capsule (kept in a->ref until the call is over). */
static int from_capsule(PyObject *cap, int want, int map, targ *a) {
  DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
  if (!m) {
    PyErr_Clear();
    Py_DECREF(cap);
    return 1;
  }
  a->ref = cap;
  a->src = SRC_CAPSULE;
  const DLTensor *d = &m->dl_tensor;
  int dt = -1, size = d->dtype.bits / 8;
  if (d->dtype.lanes == 1) {
    if (d->dtype.code == DL_FLOAT && d->dtype.bits == 32)
      dt = PE_F32;
    else if (d->dtype.code == DL_FLOAT && d->dtype.bits == 16)
      dt = PE_F16;
    else if ((d->dtype.code == DL_BFLOAT ||
              (d->dtype.code == DL_UINT && want == PE_BF16)) && d->dtype.bits == 16)
      dt = PE_BF16;
  }
  char *data = (char *)d->data + d->byte_offset;
  if (dt < 0 || (want >= 0 && want != dt) || d->device.device_type != DL_CPU || d->ndim < 2 ||
      d->ndim > 4 || (uintptr_t)data % (uintptr_t)size)
    goto helper;
  Py_ssize_t shape[4], bs[4];
  for (int i = d->ndim - 1, run = size; i >= 0; i--) {
    shape[i] = (Py_ssize_t)d->shape[i];
    bs[i] = d->strides ? (Py_ssize_t)(d->strides[i] * size) : run;
    run *= (int)d->shape[i];
  }
  int64_t sh[4], st[4];
  if (elem_strides(d->ndim, shape, bs, size, sh, st) || map4(map, d->ndim, sh, st, &a->t))
    goto helper;
  a->t.data = data;
  a->t.dtype = (pe_dtype)dt;
  return 0;
helper:
  targ_release(a);
  return 1;
}

/* torch.Tensor's accessors, called on a tensor without the attribute
 * lookup and bound method each would cost (a few hundred ns a tensor
 * instead of DLPack's ~1 us in torch 1.13, whose to_dlpack makes a new
 * view), and the dtypes compared by identity. */
static struct {
  PyObject *type;
  PyObject *data_ptr, *stride, *is_neg;              /* method descriptors */
  PyObject *shape, *dtype, *is_cpu, *requires_grad;  /* attribute descriptors */
  PyObject *f32, *f16, *bf16, *i64;
} T;

static PyObject *torch_tensor_type(void) {
  if (T.type)
    return T.type;
  PyObject *mods = PyImport_GetModuleDict();
  PyObject *torch = PyDict_GetItemWithError(mods, S_torch);
  if (!torch || torch == Py_None) /* not imported (or blocked): no tensor can exist */
    return NULL;
  PyObject *tt = PyObject_GetAttrString(torch, "Tensor");
  struct { PyObject **slot; PyObject *from; const char *name; } get[] = {
      {&T.data_ptr, tt, "data_ptr"}, {&T.stride, tt, "stride"}, {&T.is_neg, tt, "is_neg"},
      {&T.shape, tt, "shape"},       {&T.dtype, tt, "dtype"},   {&T.is_cpu, tt, "is_cpu"},
      {&T.requires_grad, tt, "requires_grad"}, {&T.f32, torch, "float32"},
      {&T.f16, torch, "float16"},    {&T.bf16, torch, "bfloat16"}, {&T.i64, torch, "int64"},
  };
  int ok = tt && PyType_Check(tt);
  for (size_t i = 0; ok && i < sizeof get / sizeof get[0]; i++)
    ok = (*get[i].slot = PyObject_GetAttrString(get[i].from, get[i].name)) != NULL;
  ok = ok && Py_TYPE(T.shape)->tp_descr_get && Py_TYPE(T.dtype)->tp_descr_get &&
       Py_TYPE(T.is_cpu)->tp_descr_get && Py_TYPE(T.requires_grad)->tp_descr_get;
  if (!ok) {
    for (size_t i = 0; i < sizeof get / sizeof get[0]; i++)
      Py_CLEAR(*get[i].slot);
    Py_XDECREF(tt);
    PyErr_Clear();
    return NULL;
  }
  T.type = tt;
  return tt;
}

static PyObject *t_get(PyObject *descr, PyObject *obj) {
  return Py_TYPE(descr)->tp_descr_get(descr, obj, (PyObject *)Py_TYPE(obj));
}

static PyObject *t_call(PyObject *method, PyObject *obj) {
  return PyObject_Vectorcall(method, &obj, 1, NULL);
}

/* 1 when v (a new reference, or NULL) is true; 0 when false; -1 when the
 * accessor failed (cleared: the helper decides). */
static int t_true(PyObject *v) {
  if (!v) {
    PyErr_Clear();
    return -1;
  }
  int r = PyObject_IsTrue(v);
  Py_DECREF(v);
  return r < 0 ? (PyErr_Clear(), -1) : r;
}

/* A torch tensor's data, dtype (by identity), shape and strides (in
 * elements) of at most 4 dims, on the CPU. 0 ok, 1 not this path. */
static int torch_layout(PyObject *obj, void **data, PyObject **dtype, int *ndim,
                        Py_ssize_t *shape, int64_t *stride) {
  if (t_true(t_get(T.is_cpu, obj)) != 1)
    return 1;
  PyObject *dt = t_get(T.dtype, obj);
  PyObject *sh = t_get(T.shape, obj), *st = t_call(T.stride, obj), *dp = t_call(T.data_ptr, obj);
  int r = 1;
  if (dt && sh && st && dp && PyTuple_Check(sh) && PyTuple_Check(st) &&
      PyTuple_GET_SIZE(sh) == PyTuple_GET_SIZE(st) && PyTuple_GET_SIZE(sh) <= 4) {
    *ndim = (int)PyTuple_GET_SIZE(sh);
    for (int i = 0; i < *ndim; i++) {
      shape[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(sh, i));
      stride[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(st, i));
    }
    *data = PyLong_AsVoidPtr(dp);
    *dtype = dt;
    r = PyErr_Occurred() ? 1 : 0;
  }
  Py_XDECREF(sh);
  Py_XDECREF(st);
  Py_XDECREF(dp);
  Py_XDECREF(dt); /* compared by identity only: the dtypes live in torch */
  PyErr_Clear();
  return r;
}

/* A torch tensor, read through its accessors, refused (to the helper) when
 * it requires grad and is written, or is a lazily negated view. */
static int from_torch(PyObject *obj, int want, int writable, int map, targ *a) {
  if ((writable && t_true(t_get(T.requires_grad, obj)) != 0) || t_true(t_call(T.is_neg, obj)) != 0)
    return 1;
  void *data;
  PyObject *dtype;
  int ndim;
  Py_ssize_t shape[4], bs[4];
  int64_t st[4], sh[4], est[4];
  if (torch_layout(obj, &data, &dtype, &ndim, shape, st))
    return 1;
  int dt = dtype == T.f32 ? PE_F32 : dtype == T.f16 ? PE_F16 : dtype == T.bf16 ? PE_BF16 : -1;
  int size = dt == PE_F32 ? 4 : 2;
  if (dt < 0 || (want >= 0 && want != dt) || ndim < 2 || (uintptr_t)data % (uintptr_t)size)
    return 1;
  for (int i = 0; i < ndim; i++)
    bs[i] = (Py_ssize_t)(st[i] * size);
  if (elem_strides(ndim, shape, bs, size, sh, est) || map4(map, ndim, sh, est, &a->t))
    return 1;
  a->t.data = data;
  a->t.dtype = (pe_dtype)dt;
  a->src = SRC_TORCH;
  return 0;
}

/* The Python helper's View: its pe_tensor (a ctypes Structure, read through
 * its buffer) is the descriptor. The helper raises for what is refused. */
static int from_helper(PyObject *helper, PyObject *obj, const char *name, int writable,
                       int map, PyObject *dtype, targ *a) {
  PyObject *v = PyObject_CallFunction(helper, "OsOii", obj, name, dtype, writable, map);
  if (!v)
    return -1;
  PyObject *t = PyObject_GetAttr(v, S_t);
  Py_buffer b;
  if (!t || PyObject_GetBuffer(t, &b, PyBUF_SIMPLE) < 0) {
    Py_XDECREF(t);
    Py_DECREF(v);
    return -1;
  }
  if (b.len != (Py_ssize_t)sizeof(pe_tensor)) {
    PyBuffer_Release(&b);
    Py_DECREF(t);
    Py_DECREF(v);
    PyErr_SetString(PyExc_RuntimeError, "posenc: the Tensor struct does not match pe_tensor");
    return -1;
  }
  memcpy(&a->t, b.buf, sizeof(pe_tensor));
  PyBuffer_Release(&b);
  Py_DECREF(t);
  a->ref = v;
  a->src = SRC_VIEW;
  return 0;
}

/* obj (None -> no tensor when optional) as a descriptor. */
static int tensor(PyObject *obj, const char *name, PyObject *dtype, int want, int writable,
                  int map, int optional, targ *a) {
  memset(a, 0, sizeof *a);
  if (obj == Py_None && optional)
    return 0;
  int r = 1;
  PyTypeObject *tp = Py_TYPE(obj);
  PyObject *tt;
  if (tp == (PyTypeObject *)G.ndarray)
    r = from_buffer(obj, want, writable, map, a);
  else if ((tt = torch_tensor_type()) && PyObject_TypeCheck(obj, (PyTypeObject *)tt))
    r = from_torch(obj, want, writable, map, a);
  else if (!PyObject_TypeCheck(obj, (PyTypeObject *)G.ndarray) &&
           PyObject_HasAttr(obj, S_dlpack)) {
    PyObject *cap = PyObject_CallMethodNoArgs(obj, S_dlpack);
    if (cap)
      r = from_capsule(cap, want, map, a);
    else
      PyErr_Clear();
  }
  if (r <= 0)
    return r;
  return from_helper(G.tensor, obj, name, writable, map, dtype, a);
}

/* ---- integer arrays -------------------------------------------------------- */

typedef struct {
  const void *p;
  int src;
  Py_buffer buf;
  PyObject *ref;
  void *owned;
  Py_ssize_t shape[4]; /* of a torch tensor */
} iarg;

static void iarg_release(iarg *g) {
  if (g->src == SRC_BUFFER)
    PyBuffer_Release(&g->buf);
  Py_CLEAR(g->ref);
  PyMem_Free(g->owned);
  g->owned = NULL;
  g->src = SRC_NONE;
}

/* A C-contiguous array of itemsize-byte signed integers (numpy, or torch
 * int64): its shape, or -1 when obj is not one (0 = taken, the caller keeps
 * g). */
static int int_buffer(PyObject *obj, int itemsize, iarg *g, int *ndim, Py_ssize_t **shape) {
  PyTypeObject *tp = Py_TYPE(obj);
  if (tp == (PyTypeObject *)G.ndarray) {
    if (PyObject_GetBuffer(obj, &g->buf, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
      PyErr_Clear();
      return -1;
    }
    g->src = SRC_BUFFER;
    const char *f = g->buf.format;
    if (f[0] == '@' || f[0] == '=' || f[0] == '<')
      f++;
    int ok = g->buf.itemsize == itemsize && f[1] == '\0' &&
             (itemsize == 8 ? (f[0] == 'l' || f[0] == 'q') : (f[0] == 'i' || f[0] == 'l'));
    if (!ok) {
      iarg_release(g);
      return -1;
    }
    g->p = g->buf.buf;
    *ndim = g->buf.ndim;
    *shape = g->buf.shape;
    return 0;
  }
  PyObject *tt = torch_tensor_type();
  if (!tt || !PyObject_TypeCheck(obj, (PyTypeObject *)tt))
    return -1;
  void *data;
  PyObject *dtype;
  int64_t st[4];
  if (itemsize != 8 || torch_layout(obj, &data, &dtype, ndim, g->shape, st) || dtype != T.i64 ||
      *ndim > 3)
    return -1;
  for (int i = *ndim - 1, run = 1; i >= 0; i--) { /* C-contiguous */
    if (g->shape[i] != 1 && st[i] != run)
      return -1;
    run *= (int)g->shape[i];
  }
  g->src = SRC_TORCH;
  g->p = data;
  *shape = g->shape;
  return 0;
}

/* int64 [axes][batch][tokens] from None, an int64 array of that shape or
 * (axes 0) of [1, tokens] / [tokens], or one integer (scalar_ok);
 * everything else through the helper (which also raises the errors). */
static int grid(PyObject *obj, const char *name, int64_t batch, int64_t tokens, int axes,
                int scalar_ok, iarg *g) {
  memset(g, 0, sizeof *g);
  if (obj == Py_None)
    return 0;
  int64_t n = batch * tokens;
  if (scalar_ok && PyLong_CheckExact(obj)) {
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (!overflow && !PyErr_Occurred()) {
      int64_t *p = PyMem_Malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
      if (!p)
        return PyErr_NoMemory(), -1;
      for (int64_t i = 0; i < n; i++)
        p[i] = v;
      g->owned = p;
      g->p = p;
      return 0;
    }
    PyErr_Clear();
  }
  int ndim;
  Py_ssize_t *shape;
  if (int_buffer(obj, 8, g, &ndim, &shape) == 0) {
    int full = axes ? ndim == 3 && shape[0] == axes && shape[1] == batch && shape[2] == tokens
                    : ndim == 2 && shape[0] == batch && shape[1] == tokens;
    int row = !axes && ((ndim == 2 && shape[0] == 1 && shape[1] == tokens) ||
                        (ndim == 1 && shape[0] == tokens));
    if (full || (row && batch == 1))
      return 0;
    if (row) { /* the same positions in every batch row */
      int64_t *p = PyMem_Malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
      if (!p) {
        iarg_release(g);
        return PyErr_NoMemory(), -1;
      }
      for (int64_t b = 0; b < batch; b++)
        memcpy(p + b * tokens, g->p, sizeof(int64_t) * (size_t)tokens);
      iarg_release(g);
      g->owned = p;
      g->p = p;
      return 0;
    }
    iarg_release(g);
  }
  PyObject *a = axes ? PyObject_CallFunction(G.mrope_positions, "OLL", obj, (long long)batch,
                                             (long long)tokens)
                     : PyObject_CallFunction(G.int64_grid, "OLLsi", obj, (long long)batch,
                                             (long long)tokens, name, scalar_ok);
  if (!a)
    return -1;
  if (a == Py_None) {
    Py_DECREF(a);
    return 0;
  }
  if (PyObject_GetBuffer(a, &g->buf, PyBUF_C_CONTIGUOUS) < 0) {
    Py_DECREF(a);
    return -1;
  }
  g->src = SRC_BUFFER;
  g->ref = a;
  g->p = g->buf.buf;
  return 0;
}

/* A contiguous vector of n values of one C type from a matching array, or
 * through a helper (float_vector / int32_vector / float_table). */
static int vector(PyObject *obj, PyObject *helper, PyObject *helper_args, int itemsize,
                  char fmt, Py_ssize_t n0, Py_ssize_t n1, iarg *g) {
  memset(g, 0, sizeof *g);
  if (obj == Py_None)
    return 0;
  if (Py_TYPE(obj) == (PyTypeObject *)G.ndarray &&
      PyObject_GetBuffer(obj, &g->buf, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) == 0) {
    g->src = SRC_BUFFER;
    const char *f = g->buf.format;
    if (f[0] == '@' || f[0] == '=' || f[0] == '<')
      f++;
    Py_ssize_t *s = g->buf.shape;
    int ok = g->buf.itemsize == itemsize && f[0] == fmt && f[1] == '\0' &&
             (n1 < 0 ? g->buf.ndim == 1 && s[0] == n0
                     : g->buf.ndim == 2 && (n0 < 0 || s[0] == n0) && s[1] == n1);
    if (ok) {
      g->p = g->buf.buf;
      return 0;
    }
    iarg_release(g);
  }
  PyErr_Clear();
  PyObject *args = PyTuple_New(1 + PyTuple_GET_SIZE(helper_args));
  if (!args)
    return -1;
  Py_INCREF(obj);
  PyTuple_SET_ITEM(args, 0, obj);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(helper_args); i++) {
    PyObject *x = PyTuple_GET_ITEM(helper_args, i);
    Py_INCREF(x);
    PyTuple_SET_ITEM(args, i + 1, x);
  }
  PyObject *a = PyObject_Call(helper, args, NULL);
  Py_DECREF(args);
  if (!a)
    return -1;
  if (PyObject_GetBuffer(a, &g->buf, PyBUF_C_CONTIGUOUS) < 0) {
    Py_DECREF(a);
    return -1;
  }
  g->src = SRC_BUFFER;
  g->ref = a;
  g->p = g->buf.buf;
  return 0;
}

/* ---- running ----------------------------------------------------------------- */

/* timed(): how many calls, and the clock read around them - the calling
 * thread's CPU time (what the calls cost whatever else the machine runs;
 * they run on this thread) or the monotonic wall clock. NULL: one call. */
typedef struct {
  long reps;
  clockid_t clock;
} timing;

static int64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Run CALL (an expression yielding pe_status) with the GIL released, once
 * (tm NULL: the result is None) or tm->reps times (the result is the
 * nanoseconds they took). */
#define RUN(CALL)                                                               \
  do {                                                                          \
    pe_status st_ = PE_OK;                                                      \
    int64_t t0_ = 0, t1_ = 0;                                                   \
    Py_BEGIN_ALLOW_THREADS                                                      \
    if (!tm) {                                                                  \
      st_ = (CALL);                                                             \
    } else {                                                                    \
      t0_ = now_ns(tm->clock);                                                  \
      for (long r_ = 0; r_ < tm->reps && st_ == PE_OK; r_++)                    \
        st_ = (CALL);                                                           \
      t1_ = now_ns(tm->clock);                                                  \
    }                                                                           \
    Py_END_ALLOW_THREADS                                                        \
    if (st_ != PE_OK)                                                           \
      result = raise_status(st_);                                               \
    else if (tm)                                                                \
      result = PyLong_FromLongLong(t1_ - t0_);                                  \
    else                                                                        \
      result = Py_NewRef(Py_None);                                              \
  } while (0)

#define NARGS(n)                                                                \
  if (nargs != (n)) {                                                           \
    PyErr_Format(PyExc_TypeError, "%s takes %d arguments (%zd given)", __func__ + 3, (n), \
                 nargs);                                                        \
    return NULL;                                                                \
  }

static uint32_t u32(PyObject *o) { return (uint32_t)PyLong_AsUnsignedLong(o); }

/* q and k swapped to [B, H, T, D] from [B, T, H, D] (layout 1). */
static void swap12(pe_tensor *t) {
  int64_t s = t->shape[1], st = t->stride[1];
  t->shape[1] = t->shape[2];
  t->stride[1] = t->stride[2];
  t->shape[2] = s;
  t->stride[2] = st;
}

static const pe_tensor *P(const targ *a) { return a->src == SRC_NONE ? NULL : &a->t; }

/* batch and tokens of the first given of q and k. */
static void bt_of(const targ *q, const targ *k, int64_t *batch, int64_t *tokens) {
  const targ *a = q->src != SRC_NONE ? q : k;
  *batch = a->src != SRC_NONE ? a->t.shape[0] : 0;
  *tokens = a->src != SRC_NONE ? a->t.shape[2] : 0;
}

/* The extent of the last dimension of an int array (numpy or torch), or -1
 * when it is not one of 1 or 2 dimensions. */
static long long last_extent(PyObject *positions) {
  Py_ssize_t *shape;
  int ndim;
  iarg g = {0};
  if (int_buffer(positions, 8, &g, &ndim, &shape) < 0)
    return -1;
  long long n = ndim == 1 || ndim == 2 ? (long long)shape[ndim - 1] : -1;
  iarg_release(&g);
  return n;
}

/* The layout of q/k: 0 [B, H, T, D], 1 [B, T, H, D], -1 told from the
 * shapes: the one under which q and k agree in batch and tokens and the
 * int64 positions ([B, T], [1, T] or [T]) have that many tokens. When the
 * shapes cannot tell (both fit, or neither), posenc._arrays.layout_of
 * decides (positions of other types) or raises. */
static int resolve_layout(int layout, targ *q, targ *k, PyObject *qo, PyObject *ko,
                          PyObject *positions) {
  if (layout < 0) {
    const pe_tensor *a = q->src != SRC_NONE ? &q->t : &k->t;
    const pe_tensor *b = q->src != SRC_NONE && k->src != SRC_NONE ? &k->t : NULL;
    long long t = positions == Py_None ? -1 : last_extent(positions);
    int fits[2];
    for (int l = 0; l < 2; l++) {
      int64_t tokens = a->shape[2 - l];
      fits[l] = (!b || (a->shape[0] == b->shape[0] && tokens == b->shape[2 - l])) &&
                (t < 0 || t == tokens);
    }
    if (fits[0] != fits[1] && (t >= 0 || positions == Py_None))
      layout = fits[1];
    else {
      PyObject *r = PyObject_CallFunction(G.layout_error, "OOO", qo, ko, positions);
      layout = r ? (int)PyLong_AsLong(r) : -1;
      Py_XDECREF(r);
      if (layout < 0)
        return -1;
    }
  }
  if (layout == 1) {
    if (q->src != SRC_NONE)
      swap12(&q->t);
    if (k->src != SRC_NONE)
      swap12(&k->t);
  }
  return 0;
}

/* ---- entry points ------------------------------------------------------------ */

/* apply_rope_qk(cache, q, k, positions, flags, pool, dtype, layout) */
static PyObject *do_apply_rope_qk(PyObject *const *args, Py_ssize_t nargs, const timing *tm) {
  NARGS(8);
  if (need(F.pe_apply_rope_qk, "pe_apply_rope_qk"))
    return NULL;
  void *c, *pool;
  int want;
  long layout = PyLong_AsLong(args[7]);
  if (handle(args[0], G.RopeCache, "cache", 0, &c) || handle(args[5], G.ThreadPool, "pool", 1, &pool) ||
      requested(args[6], &want))
    return NULL;
  PyObject *result = NULL;
  targ q, k;
  iarg pos = {0};
  int64_t batch, tokens;
  if (tensor(args[1], "q", args[6], want, 1, MAP_4D, 1, &q))
    return NULL;
  if (tensor(args[2], "k", args[6], want, 1, MAP_4D, 1, &k))
    goto out_q;
  if ((q.src != SRC_NONE || k.src != SRC_NONE) &&
      resolve_layout((int)layout, &q, &k, args[1], args[2], args[3]))
    goto out;
  bt_of(&q, &k, &batch, &tokens);
  if ((q.src != SRC_NONE || k.src != SRC_NONE) &&
      grid(args[3], "positions", batch, tokens, 0, 0, &pos))
    goto out;
  uint32_t flags = u32(args[4]);
  RUN(F.pe_apply_rope_qk(c, P(&q), P(&k), pos.p, flags, pool));
  iarg_release(&pos);
out:
  targ_release(&k);
out_q:
  targ_release(&q);
  return result;
}

/* rope_shift_k(cache, k, deltas, pool, dtype) */
static PyObject *do_rope_shift_k(PyObject *const *args, Py_ssize_t nargs, const timing *tm) {
  NARGS(5);
  if (need(F.pe_rope_shift_k, "pe_rope_shift_k"))
    return NULL;
  void *c, *pool;
  int want;
  if (handle(args[0], G.RopeCache, "cache", 0, &c) || handle(args[3], G.ThreadPool, "pool", 1, &pool) ||
      requested(args[4], &want))
    return NULL;
  PyObject *result = NULL;
  targ k;
  iarg d;
  if (tensor(args[1], "k", args[4], want, 1, MAP_4D, 0, &k))
    return NULL;
  if (grid(args[2], "deltas", k.t.shape[0], k.t.shape[2], 0, 1, &d) == 0) {
    RUN(F.pe_rope_shift_k(c, &k.t, (const int64_t *)d.p, pool));
    iarg_release(&d);
  }
  targ_release(&k);
  return result;
}

/* rope_rerotate_k(from, to, k, positions, pool, dtype) */
static PyObject *do_rope_rerotate_k(PyObject *const *args, Py_ssize_t nargs, const timing *tm) {
  NARGS(6);
  if (need(F.pe_rope_rerotate_k, "pe_rope_rerotate_k"))
    return NULL;
  void *from, *to, *pool;
  int want;
  if (handle(args[0], G.RopeCache, "from_cache", 0, &from) ||
      handle(args[1], G.RopeCache, "to_cache", 0, &to) ||
      handle(args[4], G.ThreadPool, "pool", 1, &pool) || requested(args[5], &want))
    return NULL;
  PyObject *result = NULL;
  targ k;
  iarg pos;
  if (tensor(args[2], "k", args[5], want, 1, MAP_4D, 0, &k))
    return NULL;
  if (grid(args[3], "positions", k.t.shape[0], k.t.shape[2], 0, 0, &pos) == 0) {
    RUN(F.pe_rope_rerotate_k(from, to, &k.t, (const int64_t *)pos.p, pool));
    iarg_release(&pos);
  }
  targ_release(&k);
  return result;
}

/* apply_mrope_qk(cache, q, k, positions, s0, s1, s2, flags, pool, dtype) */
static PyObject *do_apply_mrope_qk(PyObject *const *args, Py_ssize_t nargs, const timing *tm) {
  NARGS(10);
  if (need(F.pe_apply_mrope_qk, "pe_apply_mrope_qk"))
    return NULL;
  void *c, *pool;
  int want;
  int32_t sec[3];
  for (int i = 0; i < 3; i++)
    sec[i] = (int32_t)PyLong_AsLong(args[4 + i]);
  if (PyErr_Occurred() || handle(args[0], G.RopeCache, "cache", 0, &c) ||
      handle(args[8], G.ThreadPool, "pool", 1, &pool) || requested(args[9], &want))
    return NULL;
  PyObject *result = NULL;
  targ q, k;
  iarg pos = {0};
  int64_t batch, tokens;
  if (tensor(args[1], "q", args[9], want, 1, MAP_4D, 1, &q))
    return NULL;
  if (tensor(args[2], "k", args[9], want, 1, MAP_4D, 1, &k) == 0) {
    bt_of(&q, &k, &batch, &tokens);
    if ((q.src == SRC_NONE && k.src == SRC_NONE) ||
        grid(args[3], "positions", batch, tokens, 3, 0, &pos) == 0) {
      uint32_t flags = u32(args[7]);
      RUN(F.pe_apply_mrope_qk(c, P(&q), P(&k), pos.p, sec, flags, pool));
      iarg_release(&pos);
    }
    targ_release(&k);
  }
  targ_release(&q);
  return result;
}

/* apply_rope_qk_multi(caches, cache_index, q, k, positions, flags, pool, dtype) */
static PyObject *do_apply_rope_qk_multi(PyObject *const *args, Py_ssize_t nargs, const timing *tm) {
  NARGS(8);
  if (need(F.pe_apply_rope_qk_multi, "pe_apply_rope_qk_multi"))
    return NULL;
  void *pool;
  int want;
  if (handle(args[6], G.ThreadPool, "pool", 1, &pool) || requested(args[7], &want))
    return NULL;
  PyObject *seq = PySequence_Fast(args[0], "caches must be a sequence of posenc.RopeCache");
  if (!seq)
    return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  const pe_rope_cache **caches = PyMem_Calloc((size_t)(n > 0 ? n : 1), sizeof *caches);
  PyObject *result = NULL;
  if (!caches) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "caches[%zd]", i);
    if (handle(PySequence_Fast_GET_ITEM(seq, i), G.RopeCache, name, 0, (void **)&caches[i]))
      goto out_caches;
  }
  targ q, k;
  iarg pos = {0}, idx = {0};
  int64_t batch, tokens;
  if (tensor(args[2], "q", args[7], want, 1, MAP_4D, 1, &q))
    goto out_caches;
  if (tensor(args[3], "k", args[7], want, 1, MAP_4D, 1, &k))
    goto out_q;
  bt_of(&q, &k, &batch, &tokens);
  PyObject *iargs = Py_BuildValue("(Lis)", (long long)batch, (int)n, "cache_index");
  int bad = !iargs || vector(args[1], G.int32_vector, iargs, 4, 'i', batch, -1, &idx);
  Py_XDECREF(iargs);
  if (!bad && ((q.src == SRC_NONE && k.src == SRC_NONE) ||
               grid(args[4], "positions", batch, tokens, 0, 0, &pos) == 0)) {
    uint32_t flags = u32(args[5]);
    RUN(F.pe_apply_rope_qk_multi((const pe_rope_cache *const *)caches, (int32_t)n,
                                 (const int32_t *)idx.p, P(&q), P(&k), pos.p, flags, pool));
    iarg_release(&pos);
  }
  iarg_release(&idx);
  targ_release(&k);
out_q:
  targ_release(&q);
out_caches:
  PyMem_Free(caches);
  Py_DECREF(seq);
  return result;
}

/* apply_rope_qk_store(cache, q, k, k_cache, slot_mapping, positions, flags, pool,
 *                     dtype, cache_dtype) */
static PyObject *do_apply_rope_qk_store(PyObject *const *args, Py_ssize_t nargs, const timing *tm) {
  NARGS(10);
  if (need(F.pe_apply_rope_qk_store, "pe_apply_rope_qk_store"))
    return NULL;
  void *c, *pool;
  int want, want_c;
  if (handle(args[0], G.RopeCache, "cache", 0, &c) || handle(args[7], G.ThreadPool, "pool", 1, &pool) ||
      requested(args[8], &want) || requested(args[9], &want_c))
    return NULL;
  PyObject *result = NULL;
  targ q, k, kc;
  iarg slots = {0}, pos = {0};
  if (tensor(args[1], "q", args[8], want, 1, MAP_4D, 1, &q))
    return NULL;
  if (tensor(args[2], "k", args[8], want, 0, MAP_4D, 0, &k))
    goto out_q;
  if (tensor(args[3], "k_cache", args[9], want_c, 1, MAP_SLOTS, 0, &kc))
    goto out_k;
  if (grid(args[4], "slot_mapping", k.t.shape[0], k.t.shape[2], 0, 0, &slots) == 0 &&
      grid(args[5], "positions", k.t.shape[0], k.t.shape[2], 0, 0, &pos) == 0) {
    uint32_t flags = u32(args[6]);
    RUN(F.pe_apply_rope_qk_store(c, P(&q), &k.t, &kc.t, slots.p, pos.p, flags, pool));
  }
  iarg_release(&pos);
  iarg_release(&slots);
  targ_release(&kc);
out_k:
  targ_release(&k);
out_q:
  targ_release(&q);
  return result;
}

/* A norm weight: float32 [n], else posenc._arrays.norm_weight, which
 * converts or raises. */
static int weight(PyObject *w, const char *name, int64_t n, int per_token, iarg *g) {
  PyObject *a = Py_BuildValue("(sLi)", name, (long long)n, per_token);
  if (!a)
    return -1;
  int r = vector(w, G.weight, a, 4, 'f', n, -1, g);
  Py_DECREF(a);
  return r;
}

static int norm_weights(pe_qk_norm *norm, PyObject *qw, PyObject *kw, const targ *q,
                        const targ *k, iarg *gq, iarg *gk) {
  int64_t hd = (q->src != SRC_NONE ? q : k)->t.shape[3];
  int per_token = norm->scope == PE_QK_NORM_PER_TOKEN;
  int64_t nq = q->src != SRC_NONE ? hd * (per_token ? q->t.shape[1] : 1) : 0;
  int64_t nk = k->src != SRC_NONE ? hd * (per_token ? k->t.shape[1] : 1) : 0;
  memset(gk, 0, sizeof *gk);
  if (weight(qw, "q_weight", nq, per_token, gq) || weight(kw, "k_weight", nk, per_token, gk))
    return -1;
  norm->q_weight = gq->p;
  norm->k_weight = gk->p;
  return 0;
}

/* qk_norm_rope(cache, q, k, kind, scope, eps, q_weight, k_weight, positions,
 *              flags, pool, dtype) */
static PyObject *do_qk_norm_rope(PyObject *const *args, Py_ssize_t nargs, const timing *tm) {
  NARGS(12);
  if (need(F.pe_qk_norm_rope, "pe_qk_norm_rope") || need(F.pe_qk_norm_init, "pe_qk_norm_init"))
    return NULL;
  void *c, *pool;
  int want;
  pe_qk_norm norm;
  F.pe_qk_norm_init(&norm);
  norm.kind = (pe_qk_norm_kind)PyLong_AsLong(args[3]);
  norm.scope = (pe_qk_norm_scope)PyLong_AsLong(args[4]);
  norm.eps = (float)PyFloat_AsDouble(args[5]);
  if (PyErr_Occurred() || handle(args[0], G.RopeCache, "cache", 0, &c) ||
      handle(args[10], G.ThreadPool, "pool", 1, &pool) || requested(args[11], &want))
    return NULL;
  PyObject *result = NULL;
  targ q, k;
  iarg pos = {0}, wq = {0}, wk = {0};
  int64_t batch, tokens;
  if (tensor(args[1], "q", args[11], want, 1, MAP_4D, 1, &q))
    return NULL;
  if (tensor(args[2], "k", args[11], want, 1, MAP_4D, 1, &k))
    goto out_q;
  bt_of(&q, &k, &batch, &tokens);
  if ((q.src != SRC_NONE || k.src != SRC_NONE) &&
      norm_weights(&norm, args[6], args[7], &q, &k, &wq, &wk))
    goto out;
  if ((q.src == SRC_NONE && k.src == SRC_NONE) ||
      grid(args[8], "positions", batch, tokens, 0, 0, &pos) == 0) {
    uint32_t flags = u32(args[9]);
    RUN(F.pe_qk_norm_rope(c, &norm, P(&q), P(&k), pos.p, flags, pool));
  }
out:
  iarg_release(&pos);
  iarg_release(&wq);
  iarg_release(&wk);
  targ_release(&k);
out_q:
  targ_release(&q);
  return result;
}

/* qk_norm_rope_store(cache, q, k, v, k_cache, v_cache, slot_mapping, kind, scope,
 *   eps, q_weight, k_weight, positions, flags, pool, dtype, cache_dtype,
 *   v_cache_dtype) */
static PyObject *do_qk_norm_rope_store(PyObject *const *args, Py_ssize_t nargs, const timing *tm) {
  NARGS(18);
  if (need(F.pe_qk_norm_rope_store, "pe_qk_norm_rope_store") ||
      need(F.pe_qk_norm_init, "pe_qk_norm_init") || need(F.pe_kv_cache_init, "pe_kv_cache_init"))
    return NULL;
  void *c, *pool;
  int want, want_c, want_v;
  pe_qk_norm norm;
  F.pe_qk_norm_init(&norm);
  norm.kind = (pe_qk_norm_kind)PyLong_AsLong(args[7]);
  norm.scope = (pe_qk_norm_scope)PyLong_AsLong(args[8]);
  norm.eps = (float)PyFloat_AsDouble(args[9]);
  if (PyErr_Occurred() || handle(args[0], G.RopeCache, "cache", 0, &c) ||
      handle(args[14], G.ThreadPool, "pool", 1, &pool) || requested(args[15], &want) ||
      requested(args[16], &want_c) || requested(args[17], &want_v))
    return NULL;
  PyObject *result = NULL;
  targ q, k, v, kc, vc;
  iarg slots = {0}, pos = {0}, wq = {0}, wk = {0};
  memset(&v, 0, sizeof v);
  memset(&kc, 0, sizeof kc);
  memset(&vc, 0, sizeof vc);
  if (tensor(args[1], "q", args[15], want, 1, MAP_4D, 1, &q))
    return NULL;
  if (tensor(args[2], "k", args[15], want, 0, MAP_4D, 0, &k))
    goto out_q;
  if (tensor(args[3], "v", args[15], want, 0, MAP_4D, 1, &v) ||
      tensor(args[4], "k_cache", args[16], want_c, 1, MAP_4D, 0, &kc) ||
      tensor(args[5], "v_cache", args[17], want_v, 1, MAP_4D, 1, &vc) ||
      norm_weights(&norm, args[10], args[11], &q, &k, &wq, &wk))
    goto out;
  if (grid(args[6], "slot_mapping", k.t.shape[0], k.t.shape[2], 0, 0, &slots) == 0 &&
      grid(args[12], "positions", k.t.shape[0], k.t.shape[2], 0, 0, &pos) == 0) {
    pe_kv_cache kv;
    F.pe_kv_cache_init(&kv);
    kv.k = &kc.t;
    kv.v = P(&vc);
    uint32_t flags = u32(args[13]);
    RUN(F.pe_qk_norm_rope_store(c, &norm, P(&q), &k.t, P(&v), &kv, slots.p, pos.p, flags,
                                pool));
  }
out:
  iarg_release(&pos);
  iarg_release(&slots);
  iarg_release(&wq);
  iarg_release(&wk);
  targ_release(&vc);
  targ_release(&kc);
  targ_release(&v);
  targ_release(&k);
out_q:
  targ_release(&q);
  return result;
}

/* alibi_add_bias(scores, slopes, q_positions, flags, pool, dtype) */
static PyObject *do_alibi_add_bias(PyObject *const *args, Py_ssize_t nargs, const timing *tm) {
  NARGS(6);
  if (need(F.pe_alibi_add_bias, "pe_alibi_add_bias"))
    return NULL;
  void *pool;
  int want;
  if (handle(args[4], G.ThreadPool, "pool", 1, &pool) || requested(args[5], &want))
    return NULL;
  PyObject *result = NULL;
  targ s;
  iarg slopes = {0}, qp = {0};
  if (tensor(args[0], "scores", args[5], want, 1, MAP_4D, 0, &s))
    return NULL;
  PyObject *va = Py_BuildValue("(Ls)", (long long)s.t.shape[1], "slopes");
  if (va && vector(args[1], G.float_vector, va, 4, 'f', s.t.shape[1], -1, &slopes) == 0 &&
      grid(args[2], "q_positions", s.t.shape[0], s.t.shape[2], 0, 0, &qp) == 0) {
    uint32_t flags = u32(args[3]);
    RUN(F.pe_alibi_add_bias(&s.t, slopes.p, qp.p, flags, pool));
  }
  Py_XDECREF(va);
  iarg_release(&qp);
  iarg_release(&slopes);
  targ_release(&s);
  return result;
}

/* t5_add_bias(scores, table, bidirectional, num_buckets, max_distance, q_positions,
 *             flags, pool, dtype); num_buckets None = the table's rows */
static PyObject *do_t5_add_bias(PyObject *const *args, Py_ssize_t nargs, const timing *tm) {
  NARGS(9);
  if (need(F.pe_t5_add_bias, "pe_t5_add_bias"))
    return NULL;
  void *pool;
  int want;
  int bidir = PyObject_IsTrue(args[2]);
  long maxd = PyLong_AsLong(args[4]);
  Py_ssize_t nb = args[3] == Py_None ? -1 : PyLong_AsSsize_t(args[3]);
  if (bidir < 0 || PyErr_Occurred() || handle(args[7], G.ThreadPool, "pool", 1, &pool) ||
      requested(args[8], &want))
    return NULL;
  PyObject *result = NULL;
  targ s;
  iarg tab = {0}, qp = {0};
  if (tensor(args[0], "scores", args[8], want, 1, MAP_4D, 0, &s))
    return NULL;
  /* [num_buckets, heads] float32 (any rows when num_buckets is not given),
   * else posenc._arrays.float_table, which converts or raises */
  PyObject *ta = Py_BuildValue("(OL)", args[3], (long long)s.t.shape[1]);
  if (ta && vector(args[1], G.float_table, ta, 4, 'f', nb, s.t.shape[1], &tab) == 0 &&
      grid(args[5], "q_positions", s.t.shape[0], s.t.shape[2], 0, 0, &qp) == 0) {
    int32_t buckets = (int32_t)tab.buf.shape[0];
    uint32_t flags = u32(args[6]);
    RUN(F.pe_t5_add_bias(&s.t, tab.p, bidir, buckets, (int32_t)maxd, qp.p, flags, pool));
  }
  Py_XDECREF(ta);
  iarg_release(&qp);
  iarg_release(&tab);
  targ_release(&s);
  return result;
}

/* sinusoidal_add(x, positions, base, flags, pool, dtype) */
static PyObject *do_sinusoidal_add(PyObject *const *args, Py_ssize_t nargs, const timing *tm) {
  NARGS(6);
  if (need(F.pe_sinusoidal_add, "pe_sinusoidal_add"))
    return NULL;
  void *pool;
  int want;
  double base = PyFloat_AsDouble(args[2]);
  if (PyErr_Occurred() || handle(args[4], G.ThreadPool, "pool", 1, &pool) ||
      requested(args[5], &want))
    return NULL;
  PyObject *result = NULL;
  targ x;
  iarg pos;
  if (tensor(args[0], "x", args[5], want, 1, MAP_ROWS, 0, &x))
    return NULL;
  if (grid(args[1], "positions", x.t.shape[0], x.t.shape[2], 0, 0, &pos) == 0) {
    uint32_t flags = u32(args[3]);
    RUN(F.pe_sinusoidal_add(&x.t, pos.p, base, flags, pool));
    iarg_release(&pos);
  }
  targ_release(&x);
  return result;
}

/* learned_add(x, table, positions, pool, dtype, table_dtype) */
static PyObject *do_learned_add(PyObject *const *args, Py_ssize_t nargs, const timing *tm) {
  NARGS(6);
  if (need(F.pe_learned_add, "pe_learned_add"))
    return NULL;
  void *pool;
  int want, want_t;
  if (handle(args[3], G.ThreadPool, "pool", 1, &pool) || requested(args[4], &want) ||
      requested(args[5], &want_t))
    return NULL;
  PyObject *result = NULL;
  targ x, t;
  iarg pos;
  if (tensor(args[0], "x", args[4], want, 1, MAP_ROWS, 0, &x))
    return NULL;
  if (tensor(args[1], "table", args[5], want_t, 0, MAP_TABLE, 0, &t) == 0) {
    if (grid(args[2], "positions", x.t.shape[0], x.t.shape[2], 0, 0, &pos) == 0) {
      RUN(F.pe_learned_add(&x.t, &t.t, pos.p, pool));
      iarg_release(&pos);
    }
    targ_release(&t);
  }
  targ_release(&x);
  return result;
}

/* ---- the module ---------------------------------------------------------------- */

#define STR_(x) #x
#define STR(x) STR_(x)
/* The version of the posenc.h this module was compiled with. */
#define HEADER_VERSION STR(PE_VERSION_MAJOR) "." STR(PE_VERSION_MINOR) "." STR(PE_VERSION_PATCH)

typedef PyObject *(*entry_fn)(PyObject *const *, Py_ssize_t, const timing *);

#define ENTRIES(X)                                                              \
  X(apply_rope_qk) X(rope_shift_k) X(rope_rerotate_k) X(apply_mrope_qk)          \
  X(apply_rope_qk_multi) X(apply_rope_qk_store) X(qk_norm_rope)                  \
  X(qk_norm_rope_store) X(alibi_add_bias) X(t5_add_bias) X(sinusoidal_add)       \
  X(learned_add)

#define X(name)                                                                 \
  static PyObject *py_##name(PyObject *self, PyObject *const *args, Py_ssize_t nargs) { \
    (void)self;                                                                 \
    return do_##name(args, nargs, NULL);                                        \
  }
ENTRIES(X)
#undef X

static const struct { const char *name; entry_fn fn; } entries[] = {
#define X(name) {#name, do_##name},
    ENTRIES(X)
#undef X
};

/* timed([clock,] name, reps, *args): clock "cpu" (the default) or "wall". */
static PyObject *py_timed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  timing tm = {0, CLOCK_THREAD_CPUTIME_ID};
  if (nargs >= 1 && PyUnicode_Check(args[0]) &&
      (!PyUnicode_CompareWithASCIIString(args[0], "wall") ||
       !PyUnicode_CompareWithASCIIString(args[0], "cpu"))) {
    if (!PyUnicode_CompareWithASCIIString(args[0], "wall"))
      tm.clock = CLOCK_MONOTONIC;
    args++;
    nargs--;
  }
  if (nargs < 2 || !PyUnicode_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "timed([clock,] name, reps, *args)");
    return NULL;
  }
  tm.reps = PyLong_AsLong(args[1]);
  if (tm.reps < 1) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "timed: reps must be >= 1");
    return NULL;
  }
  const char *name = PyUnicode_AsUTF8(args[0]);
  for (size_t i = 0; name && i < sizeof entries / sizeof entries[0]; i++)
    if (!strcmp(name, entries[i].name))
      return entries[i].fn(args + 2, nargs - 2, &tm);
  if (name)
    PyErr_Format(PyExc_ValueError, "timed: no entry point %s", name);
  return NULL;
}

/* _bind(functions, objects): functions maps each pe_* name to its address
 * (missing: not exported), objects the Python classes and helpers. */
static PyObject *py_bind(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 2 || !PyDict_Check(args[0]) || !PyDict_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_bind(functions: dict, objects: dict)");
    return NULL;
  }
#define X(name)                                                                 \
  {                                                                             \
    PyObject *a = PyDict_GetItemString(args[0], #name);                         \
    F.name = a ? (__typeof__(F.name))PyLong_AsVoidPtr(a) : NULL;                \
  }
  PE_FUNCTIONS(X)
#undef X
  struct { const char *key; PyObject **slot; } objs[] = {
      {"ndarray", &G.ndarray},         {"RopeCache", &G.RopeCache},
      {"ThreadPool", &G.ThreadPool},   {"PosencError", &G.PosencError},
      {"BusyError", &G.BusyError},     {"tensor", &G.tensor},
      {"int64_grid", &G.int64_grid},   {"mrope_positions", &G.mrope_positions},
      {"int32_vector", &G.int32_vector}, {"float_vector", &G.float_vector},
      {"float_table", &G.float_table}, {"weight", &G.weight},
      {"handle_of", &G.handle_of},
      {"requested", &G.requested},     {"missing", &G.missing},
      {"layout_error", &G.layout_error},
  };
  for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) {
    PyObject *o = PyDict_GetItemString(args[1], objs[i].key);
    if (!o) {
      PyErr_Format(PyExc_KeyError, "_bind: %s missing", objs[i].key);
      return NULL;
    }
    Py_INCREF(o);
    Py_XSETREF(*objs[i].slot, o);
  }
  if (PyErr_Occurred())
    return NULL;
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
#define X(name) {#name, (PyCFunction)(void (*)(void))py_##name, METH_FASTCALL, NULL},
    ENTRIES(X)
#undef X
    {"timed", (PyCFunction)(void (*)(void))py_timed, METH_FASTCALL,
     "timed([clock,] name, reps, *args): run entry point `name` reps times on the same "
     "descriptors (the GIL released); the nanoseconds they took on clock 'cpu' (this "
     "thread's CPU time, the default) or 'wall'."},
    {"_bind", (PyCFunction)(void (*)(void))py_bind, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "posenc._posenc",
    "The compiled hot path of posenc (see the comment at the top of _posenc.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__posenc(void) {
  struct { PyObject **s; const char *v; } names[] = {
      {&S_ptr, "_ptr"},   {&S_requires_grad, "requires_grad"}, {&S_is_neg, "is_neg"},
      {&S_t, "t"},        {&S_dlpack, "__dlpack__"},           {&S_torch, "torch"},
      {&S_ndim, "ndim"},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!*names[i].s && !(*names[i].s = PyUnicode_InternFromString(names[i].v)))
      return NULL;
  PyObject *m = PyModule_Create(&module);
  if (m && (PyModule_AddIntConstant(m, "SIZEOF_TENSOR", (long)sizeof(pe_tensor)) < 0 ||
            PyModule_AddStringConstant(m, "HEADER_VERSION", HEADER_VERSION) < 0)) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
