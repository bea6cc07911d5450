/*
 * posenc._posenc - the hot path of the Python binding: the in-place calls of
 * libposenc (RoPE and its serving variants, ALiBi/T5 score biases, the
 * absolute embeddings) from Python objects to pe_tensor descriptors in C,
 * the kernel run with the GIL released.
 *
 * Arrays are read, without a copy, through
 *   - the buffer protocol for numpy arrays (float32 'f', float16 'e',
 *     uint16 'H' read as bfloat16 when the caller asks for it; uint8 'B'
 *     for the byte caches of MLA; int64 for positions), which also says
 *     whether the array is writable;
 *   - torch.Tensor's own accessors for torch tensors (data_ptr, shape,
 *     stride, dtype, is_cpu; requires_grad for tensors written and the lazy
 *     negation bit, which DLPack could not carry): float32, float16 and
 *     bfloat16 on the CPU (uint8 for a byte cache);
 *   - DLPack (__dlpack__(), kDLFloat 32/16, kDLBfloat 16, kDLUInt 8 for a
 *     byte cache, CPU) for any other object that speaks it.
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
 * does not export is left NULL and reported by posenc._lib.missing when called.
 *
 * Each entry point returns None; timed() runs one with a repetition count:
 * the C call that many times on the same descriptors, returning the
 * nanoseconds it took - what posenc.bench compares a Python call with.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "posenc.h"

#if PY_VERSION_HEX < 0x030A0000 /* Python 3.9 */
static inline PyObject *Py_NewRef(PyObject *o) {
  Py_INCREF(o);
  return o;
}
#endif

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

enum { DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_CPU = 1 };

/* The element kind of a byte tensor (uint8: an MLA cache of a quantized
 * format), beside the pe_dtype values; its descriptor's dtype is not read. */
enum { DT_BYTES = 0x100 };

/* ---- the library's functions, set by _bind ------------------------------- */

#define PE_FUNCTIONS(X)                                                        \
  X(pe_last_error) X(pe_apply_rope_qk) X(pe_rope_shift_k) X(pe_rope_rerotate_k) \
  X(pe_apply_rope_qk_multi) X(pe_apply_mrope_qk) X(pe_apply_rope_qk_store)     \
  X(pe_qk_norm_init) X(pe_kv_cache_init) X(pe_qk_norm_rope)                    \
  X(pe_qk_norm_rope_store) X(pe_alibi_add_bias) X(pe_t5_add_bias)              \
  X(pe_sinusoidal_add) X(pe_learned_add) X(pe_mla_rope_store) X(pe_mla_cache_read)

static struct {
#define X(name) __typeof__(name) *name;
  PE_FUNCTIONS(X)
#undef X
} F;

/* Python objects the module works with, set by _bind: the classes whose
 * handles it reads, the exceptions, and the helpers of posenc._arrays that
 * take an argument the fast paths do not. */
static struct {
  PyObject *ndarray, *RopeCache, *ThreadPool, *MLA, *PosencError, *BusyError;
  PyObject *tensor, *int64_grid, *mrope_positions, *int32_vector, *float_vector,
      *float_table, *weight, *handle_of, *requested, *missing, *layout_error, *mla_cache;
} G;

static PyObject *S_ptr, *S_t, *S_dlpack, *S_torch, *S_c;

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
  if (PyObject_TypeCheck(obj, (PyTypeObject *)cls)) {
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
  PyObject *r = PyObject_CallFunction(G.handle_of, "OOs", obj, cls, name);
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
  int ndim; /* of the object described (before the mapping to 4-D) */
  Py_buffer buf;
  PyObject *ref; /* the DLPack capsule, or the View of the Python helper */
} targ;

static void targ_release(targ *a) {
  if (a->src == SRC_BUFFER)
    PyBuffer_Release(&a->buf);
  Py_CLEAR(a->ref);
  a->src = SRC_NONE;
}

static const pe_tensor *P(const targ *a) { return a->src == SRC_NONE ? NULL : &a->t; }

/* The requested dtype (None -> -1): the lower-case names here, everything
 * else (numpy and torch dtypes, other spellings, errors) through
 * posenc._arrays._requested. */
static int requested(PyObject *dtype, int *out) {
  static const struct { const char *name; int dt; } names[] = {
      {"bf16", PE_BF16}, {"bfloat16", PE_BF16}, {"f32", PE_F32},   {"float32", PE_F32},
      {"f16", PE_F16},   {"float16", PE_F16},   {"half", PE_F16},
  };
  *out = -1;
  if (dtype == Py_None)
    return 0;
  if (PyUnicode_Check(dtype))
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
      if (!PyUnicode_CompareWithASCIIString(dtype, names[i].name)) {
        *out = names[i].dt;
        return 0;
      }
  PyObject *r = PyObject_CallOneArg(G.requested, dtype);
  if (!r)
    return -1;
  *out = (int)PyLong_AsLong(r);
  Py_DECREF(r);
  return PyErr_Occurred() ? -1 : 0;
}

/* The descriptor of ndim dims of `size`-byte elements at data, byte strides
 * bs, as the binding always read them (a dimension of extent 1 is never
 * stepped over, so its stride is free; the last must be contiguous; the
 * data aligned to the element), mapped to 4-D. 0, or 1 when the Python
 * helper must decide. */
static int describe(targ *a, void *data, int dt, int ndim, const Py_ssize_t *shape,
                    const Py_ssize_t *bs, int size, int map) {
  static const int8_t order[4][4] = {
      {0, 1, 2, 3},   /* 4-D */
      {-1, 1, 0, 2},  /* slots: [S, H, D] -> [1, H, S, D] */
      {0, -1, 1, 2},  /* rows: [B, T, D] -> [B, 1, T, D] */
      {-1, -1, 0, 1}, /* table: [L, D] -> [1, 1, L, D] */
  };
  int fewer = map == MAP_SLOTS || map == MAP_ROWS ? 3 : map == MAP_TABLE ? 2 : 4;
  if ((ndim != 4 && ndim != fewer) || (uintptr_t)data % (uintptr_t)size)
    return 1;
  int64_t st[4];
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 1)
      st[i] = i == ndim - 1 ? 1 : (bs[i] % size == 0 ? bs[i] / size : 0);
    else if (bs[i] % size)
      return 1;
    else
      st[i] = bs[i] / size;
  }
  if (st[ndim - 1] != 1)
    return 1;
  const int8_t *o = order[ndim == 4 ? 0 : map];
  for (int i = 0; i < 4; i++) {
    a->t.shape[i] = o[i] < 0 ? 1 : shape[o[i]];
    a->t.stride[i] = o[i] < 0 ? 0 : st[o[i]];
  }
  a->t.data = data;
  a->t.dtype = dt == DT_BYTES ? PE_F32 : (pe_dtype)dt; /* a byte tensor's is not read */
  a->ndim = ndim;
  return 0;
}

/* A buffer's format without its native byte-order prefix, or NULL when it
 * names another byte order (every target of this module is little-endian). */
static const char *native_format(const char *f) {
  if (!f)
    return "B";
  if (f[0] == '@' || f[0] == '=' || f[0] == '<')
    return f + 1;
  return f[0] == '>' || f[0] == '!' ? NULL : f;
}

/* numpy through the buffer protocol. 0 ok, 1 for the helper. */
static int from_buffer(PyObject *obj, int want, int writable, int map, targ *a) {
  int flags = PyBUF_RECORDS_RO | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, &a->buf, flags) < 0) {
    PyErr_Clear(); /* read-only, or no buffer for this dtype: the helper says why */
    return 1;
  }
  a->src = SRC_BUFFER;
  Py_buffer *b = &a->buf;
  const char *f = native_format(b->format);
  int dt = !f || f[1] ? -1
           : f[0] == 'f' && b->itemsize == 4                    ? PE_F32
           : f[0] == 'e' && b->itemsize == 2                    ? PE_F16
           : f[0] == 'H' && b->itemsize == 2 && want == PE_BF16 ? PE_BF16
           : f[0] == 'B' && b->itemsize == 1 && want == DT_BYTES ? DT_BYTES
                                                                : -1;
  if (dt < 0 || (want >= 0 && want != dt) ||
      describe(a, b->buf, dt, b->ndim, b->shape, b->strides, (int)b->itemsize, map)) {
    targ_release(a);
    return 1;
  }
  return 0;
}

/* A DLPack capsule (kept in a->ref until the call is over). 0 ok, 1 for
 * the helper. */
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
  DLDataType t = d->dtype;
  int dt = t.lanes != 1 ? -1
           : t.code == DL_FLOAT && t.bits == 32 ? PE_F32
           : t.code == DL_FLOAT && t.bits == 16 ? PE_F16
           : (t.code == DL_BFLOAT || (t.code == DL_UINT && want == PE_BF16)) && t.bits == 16
               ? PE_BF16
           : t.code == DL_UINT && t.bits == 8 && want == DT_BYTES ? DT_BYTES
               : -1;
  int size = t.bits / 8;
  Py_ssize_t shape[4], bs[4];
  if (dt < 0 || (want >= 0 && want != dt) || d->device.device_type != DL_CPU || d->ndim < 1 ||
      d->ndim > 4)
    goto helper;
  for (int i = d->ndim - 1, run = size; i >= 0; i--) {
    shape[i] = (Py_ssize_t)d->shape[i];
    bs[i] = d->strides ? (Py_ssize_t)(d->strides[i] * size) : run;
    run *= (int)d->shape[i];
  }
  if (describe(a, (char *)d->data + d->byte_offset, dt, d->ndim, shape, bs, size, map))
    goto helper;
  return 0;
helper:
  targ_release(a);
  return 1;
}

/* torch.Tensor's accessors, called on a tensor without the attribute
 * lookup and bound method each would cost (about 0.5 us a tensor in all,
 * where torch 1.13's DLPack export, which makes a new view, takes ~1 us),
 * and the dtypes compared by identity. */
static struct {
  PyObject *type;
  PyObject *data_ptr, *stride, *is_neg;              /* method descriptors */
  PyObject *shape, *dtype, *is_cpu, *requires_grad;  /* attribute descriptors */
  PyObject *f32, *f16, *bf16, *i64, *u8;
} T;

static PyObject *torch_tensor_type(void) {
  if (T.type)
    return T.type;
  PyObject *torch = PyDict_GetItemWithError(PyImport_GetModuleDict(), S_torch);
  if (!torch || torch == Py_None) /* not imported (or blocked): no tensor can exist */
    return NULL;
  PyObject *tt = PyObject_GetAttrString(torch, "Tensor");
  struct { PyObject **slot; PyObject *from; const char *name; } get[] = {
      {&T.data_ptr, tt, "data_ptr"}, {&T.stride, tt, "stride"}, {&T.is_neg, tt, "is_neg"},
      {&T.shape, tt, "shape"},       {&T.dtype, tt, "dtype"},   {&T.is_cpu, tt, "is_cpu"},
      {&T.requires_grad, tt, "requires_grad"}, {&T.f32, torch, "float32"},
      {&T.f16, torch, "float16"},    {&T.bf16, torch, "bfloat16"}, {&T.i64, torch, "int64"},
      {&T.u8, torch, "uint8"},
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

static int is_torch(PyObject *obj) {
  PyObject *tt = torch_tensor_type();
  return tt && PyObject_TypeCheck(obj, (PyTypeObject *)tt);
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

/* A CPU tensor's data, dtype (borrowed: compared by identity), shape and
 * element strides, at most 4 dims. 0 ok, 1 not this path. */
static int torch_layout(PyObject *obj, void **data, PyObject **dtype, int *ndim,
                        Py_ssize_t *shape, Py_ssize_t *stride) {
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
      stride[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(st, i));
    }
    *data = PyLong_AsVoidPtr(dp);
    *dtype = dt;
    r = PyErr_Occurred() ? 1 : 0;
  }
  Py_XDECREF(sh);
  Py_XDECREF(st);
  Py_XDECREF(dp);
  Py_XDECREF(dt); /* the dtypes live in torch */
  PyErr_Clear();
  return r;
}

/* A torch tensor, refused (to the helper) when it requires grad and is
 * written, or is a lazily negated view (its memory holds -x). */
static int from_torch(PyObject *obj, int want, int writable, int map, targ *a) {
  void *data;
  PyObject *dtype;
  int ndim;
  Py_ssize_t shape[4], bs[4];
  if ((writable && t_true(t_get(T.requires_grad, obj)) != 0) ||
      t_true(t_call(T.is_neg, obj)) != 0 || torch_layout(obj, &data, &dtype, &ndim, shape, bs))
    return 1;
  int dt = dtype == T.f32 ? PE_F32 : dtype == T.f16 ? PE_F16 : dtype == T.bf16 ? PE_BF16
           : dtype == T.u8 && want == DT_BYTES ? DT_BYTES : -1;
  int size = dt == PE_F32 ? 4 : dt == DT_BYTES ? 1 : 2;
  if (dt < 0 || (want >= 0 && want != dt))
    return 1;
  for (int i = 0; i < ndim; i++)
    bs[i] *= size;
  if (describe(a, data, dt, ndim, shape, bs, size, map))
    return 1;
  a->src = SRC_TORCH;
  return 0;
}

/* A View a Python helper returned (a new reference, or NULL: it raised):
 * its pe_tensor (a ctypes Structure, read through its buffer) is the
 * descriptor. */
static int from_view(PyObject *v, targ *a) {
  if (!v)
    return -1;
  a->ref = v;
  a->src = SRC_VIEW;
  PyObject *t = PyObject_GetAttr(v, S_t);
  Py_buffer b;
  if (!t || PyObject_GetBuffer(t, &b, PyBUF_SIMPLE) < 0) {
    Py_XDECREF(t);
    return -1;
  }
  int ok = b.len == (Py_ssize_t)sizeof(pe_tensor);
  if (ok)
    memcpy(&a->t, b.buf, sizeof(pe_tensor));
  PyBuffer_Release(&b);
  Py_DECREF(t);
  if (!ok)
    PyErr_SetString(PyExc_RuntimeError, "posenc: the Tensor struct does not match pe_tensor");
  return ok ? 0 : -1;
}

/* The Python helper's View of a tensor argument (posenc._arrays.tensor_view),
 * which raises for what is refused. */
static int from_helper(PyObject *obj, const char *name, int writable, int map, PyObject *dtype,
                       targ *a) {
  return from_view(PyObject_CallFunction(G.tensor, "OsOii", obj, name, dtype, writable, map), a);
}

/* obj described by the fast paths (numpy, torch, DLPack): 0, or 1 when
 * the Python helper must decide (nothing held). */
static int tensor_fast(PyObject *obj, int want, int writable, int map, targ *a) {
  int r = 1;
  if (Py_TYPE(obj) == (PyTypeObject *)G.ndarray)
    r = from_buffer(obj, want, writable, map, a);
  else if (is_torch(obj))
    r = from_torch(obj, want, writable, map, a);
  else if (!PyObject_TypeCheck(obj, (PyTypeObject *)G.ndarray) &&
           PyObject_HasAttr(obj, S_dlpack)) {
    PyObject *cap = PyObject_CallMethodNoArgs(obj, S_dlpack);
    if (cap)
      r = from_capsule(cap, want, map, a);
    else
      PyErr_Clear();
  }
  return r;
}

/* obj (None -> no tensor when optional) as a descriptor. */
static int tensor(PyObject *obj, const char *name, PyObject *dtype, int want, int writable,
                  int map, int optional, targ *a) {
  a->src = SRC_NONE;
  a->ref = NULL;
  if (obj == Py_None && optional)
    return 0;
  int r = tensor_fast(obj, want, writable, map, a);
  return r <= 0 ? r : from_helper(obj, name, writable, map, dtype, a);
}

/* ---- integer and float arrays ----------------------------------------------- */

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

/* A C-contiguous numpy array of one format character (int64: 'l' or 'q')
 * and itemsize, or a C-contiguous torch int64 tensor: 0 and its shape, or 1
 * when obj is not one. */
static int c_array(PyObject *obj, const char *formats, int itemsize, iarg *g, int *ndim,
                   Py_ssize_t **shape) {
  if (Py_TYPE(obj) == (PyTypeObject *)G.ndarray) {
    if (PyObject_GetBuffer(obj, &g->buf, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
      PyErr_Clear();
      return 1;
    }
    g->src = SRC_BUFFER;
    const char *f = native_format(g->buf.format);
    if (!f || f[1] || !strchr(formats, f[0]) || g->buf.itemsize != itemsize) {
      iarg_release(g);
      return 1;
    }
    g->p = g->buf.buf;
    *ndim = g->buf.ndim;
    *shape = g->buf.shape;
    return 0;
  }
  void *data;
  PyObject *dtype;
  Py_ssize_t st[4];
  if (itemsize != 8 || !is_torch(obj) || torch_layout(obj, &data, &dtype, ndim, g->shape, st) ||
      dtype != T.i64)
    return 1;
  for (Py_ssize_t i = *ndim - 1, run = 1; i >= 0; i--) {
    if (g->shape[i] != 1 && st[i] != run)
      return 1;
    run *= g->shape[i];
  }
  g->src = SRC_TORCH;
  g->p = data;
  *shape = g->shape;
  return 0;
}

/* The array a Python helper returned (a new reference, or NULL: raised),
 * held in g. */
static int from_helper_array(PyObject *a, iarg *g) {
  if (!a)
    return -1;
  if (a == Py_None) {
    Py_DECREF(a);
    return 0;
  }
  g->ref = a;
  if (PyObject_GetBuffer(a, &g->buf, PyBUF_C_CONTIGUOUS) < 0)
    return -1;
  g->src = SRC_BUFFER;
  g->p = g->buf.buf;
  return 0;
}

/* int64 [axes][batch][tokens] (axes 0: [batch][tokens]) from None, an int64
 * array of that shape or (axes 0) of [1, tokens] / [tokens], or one integer
 * (scalar_ok); everything else through posenc._arrays.int64_grid /
 * mrope_positions (which also raise the errors). */
static int grid(PyObject *obj, const char *name, int64_t batch, int64_t tokens, int axes,
                int scalar_ok, iarg *g) {
  if (obj == Py_None)
    return 0;
  int64_t n = batch * tokens;
  long long v = 0;
  int ndim, overflow = 1, row = 0;
  Py_ssize_t *shape;
  if (scalar_ok && PyLong_CheckExact(obj))
    v = PyLong_AsLongLongAndOverflow(obj, &overflow);
  if (!overflow && !PyErr_Occurred()) {
    row = 2; /* every token the same */
  } else if (PyErr_Clear(), c_array(obj, "lq", 8, g, &ndim, &shape) == 0) {
    if (axes ? ndim == 3 && shape[0] == axes && shape[1] == batch && shape[2] == tokens
             : ndim == 2 && shape[0] == batch && shape[1] == tokens)
      return 0;
    row = !axes && ((ndim == 2 && shape[0] == 1 && shape[1] == tokens) ||
                    (ndim == 1 && shape[0] == tokens));
    if (row && batch == 1)
      return 0;
  }
  if (row) { /* the same positions in every batch row, or one value */
    int64_t *p = PyMem_Malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    if (!p)
      return PyErr_NoMemory(), -1;
    for (int64_t i = 0; i < n; i++)
      p[i] = row == 2 ? v : ((const int64_t *)g->p)[i % tokens];
    iarg_release(g);
    g->owned = p;
    g->p = p;
    return 0;
  }
  iarg_release(g);
  return from_helper_array(
      axes ? PyObject_CallFunction(G.mrope_positions, "OLL", obj, (long long)batch,
                                   (long long)tokens)
           : PyObject_CallFunction(G.int64_grid, "OLLsi", obj, (long long)batch,
                                   (long long)tokens, name, scalar_ok),
      g);
}

/* A C-contiguous numpy array of format fmt ('f' float32, 'i' int32) and
 * shape [n0] (n1 < 0) or [n0 (any when < 0), n1], or what helper(obj,
 * *helper_args) returns for anything else; None is NULL when none_ok. */
static int vector(PyObject *obj, PyObject *helper, PyObject *helper_args, char fmt,
                  Py_ssize_t n0, Py_ssize_t n1, int none_ok, iarg *g) {
  if (obj == Py_None && none_ok)
    return 0;
  int ndim;
  Py_ssize_t *s;
  char formats[2] = {fmt, 0};
  if (Py_TYPE(obj) == (PyTypeObject *)G.ndarray && c_array(obj, formats, 4, g, &ndim, &s) == 0) {
    if (n1 < 0 ? ndim == 1 && s[0] == n0 : ndim == 2 && (n0 < 0 || s[0] == n0) && s[1] == n1)
      return 0;
    iarg_release(g);
  }
  PyObject *head = helper_args ? PyTuple_Pack(1, obj) : NULL;
  PyObject *args = head ? PySequence_Concat(head, helper_args) : NULL;
  PyObject *a = args ? PyObject_Call(helper, args, NULL) : NULL;
  Py_XDECREF(head);
  Py_XDECREF(args);
  return from_helper_array(a, g);
}

/* ---- one call's arguments ---------------------------------------------------- */

/* timed(): how many calls, and the clock read around them - the calling
 * thread's CPU time (what the calls cost whatever else the machine runs;
 * they run on this thread) or the monotonic wall clock. NULL: one call. */
typedef struct {
  long reps;
  clockid_t clock;
} timing;

/* What one call has taken (released together by end()); once an argument
 * fails (an exception set), the later ones are not read and the C call
 * does not run. */
typedef struct {
  targ t[6];
  iarg g[6];
  int nt, ng, failed;
  void *pool;
  const timing *tm;
  PyObject *result;
  PyObject *held; /* a reference end() drops (the caches' sequence) */
  void *mem;      /* memory end() frees (the caches' handles) */
} frame;

enum { OPTIONAL = 1, WRITTEN = 2 };

/* The frame of a call of fn taking n arguments a[], the pool in a[pool]
 * (pool < 0: the call takes none). */
static int begin(frame *f, const char *fname, void *fn, PyObject *const *a, Py_ssize_t nargs,
                 Py_ssize_t n, Py_ssize_t pool, const timing *tm) {
  f->nt = f->ng = f->failed = 0;
  f->result = f->held = NULL;
  f->mem = NULL;
  f->pool = NULL;
  f->tm = tm;
  if (nargs != n) {
    PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", fname + 3, n, nargs);
    return -1;
  }
  return need(fn, fname) || (pool >= 0 && handle(a[pool], G.ThreadPool, "pool", 1, &f->pool))
             ? -1
             : 0;
}

static PyObject *end(frame *f) {
  for (int i = 0; i < f->nt; i++)
    targ_release(&f->t[i]);
  for (int i = 0; i < f->ng; i++)
    iarg_release(&f->g[i]);
  Py_XDECREF(f->held);
  PyMem_Free(f->mem);
  return f->result;
}

static int fail_if(frame *f, int bad) {
  f->failed |= bad != 0;
  return f->failed;
}

static void *arg_cache(frame *f, PyObject *obj, const char *name) {
  void *c = NULL;
  if (!f->failed)
    fail_if(f, handle(obj, G.RopeCache, name, 0, &c));
  return c;
}

static targ *arg_tensor(frame *f, PyObject *obj, const char *name, PyObject *dtype, int flags,
                        int map) {
  targ *a = &f->t[f->nt++];
  a->src = SRC_NONE;
  a->ref = NULL;
  int want;
  if (!f->failed)
    fail_if(f, requested(dtype, &want) || tensor(obj, name, dtype, want, flags & WRITTEN, map,
                                                 flags & OPTIONAL, a));
  return a;
}

static iarg *new_iarg(frame *f) {
  iarg *g = &f->g[f->ng++];
  g->p = NULL;
  g->src = SRC_NONE;
  g->ref = NULL;
  g->owned = NULL;
  return g;
}

/* positions ([axes][batch][tokens] int64) for x's batch and tokens; NULL
 * when x is not given (the library reports that). */
static const int64_t *arg_grid(frame *f, PyObject *obj, const char *name, const targ *x,
                               int axes, int scalar_ok) {
  iarg *g = new_iarg(f);
  if (!f->failed && x->src != SRC_NONE)
    fail_if(f, grid(obj, name, x->t.shape[0], x->t.shape[2], axes, scalar_ok, g));
  return g->p;
}

/* A vector through vector(), None for NULL; helper_args is a new reference
 * (or NULL: an exception is set). */
static iarg *arg_vector(frame *f, PyObject *obj, PyObject *helper, PyObject *helper_args,
                        char fmt, Py_ssize_t n0, Py_ssize_t n1) {
  iarg *g = new_iarg(f);
  if (!f->failed)
    fail_if(f, vector(obj, helper, helper_args, fmt, n0, n1, helper != G.float_table, g));
  Py_XDECREF(helper_args);
  return g;
}

static long arg_long(frame *f, PyObject *obj) {
  long v = f->failed ? 0 : PyLong_AsLong(obj);
  fail_if(f, PyErr_Occurred() != NULL);
  return v;
}

static double arg_double(frame *f, PyObject *obj) {
  double v = f->failed ? 0 : PyFloat_AsDouble(obj);
  fail_if(f, PyErr_Occurred() != NULL);
  return v;
}

static int64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Run CALL (an expression yielding pe_status, of values read before: it
 * runs without the GIL) with the GIL released, once
 * (f->tm NULL: the result is None) or f->tm->reps times (the result is the
 * nanoseconds they took), unless an argument failed. */
#define RUN(f, CALL)                                                            \
  do {                                                                          \
    const timing *tm_ = (f)->tm;                                                \
    pe_status st_ = PE_OK;                                                      \
    int64_t t0_ = 0, t1_ = 0;                                                   \
    if ((f)->failed)                                                            \
      break;                                                                    \
    Py_BEGIN_ALLOW_THREADS                                                      \
    if (!tm_) {                                                                 \
      st_ = (CALL);                                                             \
    } else {                                                                    \
      t0_ = now_ns(tm_->clock);                                                 \
      for (long r_ = 0; r_ < tm_->reps && st_ == PE_OK; r_++)                   \
        st_ = (CALL);                                                           \
      t1_ = now_ns(tm_->clock);                                                 \
    }                                                                           \
    Py_END_ALLOW_THREADS                                                        \
    (f)->result = st_ != PE_OK ? raise_status(st_)                              \
                  : tm_       ? PyLong_FromLongLong(t1_ - t0_)                   \
                              : Py_NewRef(Py_None);                              \
  } while (0)

/* An entry point's first and last statements: BEGIN declares its frame f
 * (the library function fn, n arguments a[], the pool in a[pool], or no
 * pool for pool -1) or returns NULL; FINISH runs the call (RUN) and returns
 * its result, every argument released. */
#define BEGIN(fn, n, pool)                                                      \
  frame f;                                                                      \
  if (begin(&f, #fn, F.fn, a, nargs, (n), (pool), tm))                          \
  return NULL

#define FINISH(CALL)                                                            \
  do {                                                                          \
    RUN(&f, CALL);                                                              \
    return end(&f);                                                             \
  } while (0)

/* ---- the layout of q and k ----------------------------------------------------- */

/* The extent of the last dimension of int64 positions of 1 or 2 dims
 * (numpy or torch), or -1. */
static long long last_extent(PyObject *positions) {
  Py_ssize_t *shape;
  int ndim;
  iarg g = {0};
  if (positions == Py_None || c_array(positions, "lq", 8, &g, &ndim, &shape))
    return -1;
  long long n = ndim == 1 || ndim == 2 ? (long long)shape[ndim - 1] : -1;
  iarg_release(&g);
  return n;
}

static void swap12(pe_tensor *t) {
  int64_t s = t->shape[1], st = t->stride[1];
  t->shape[1] = t->shape[2];
  t->stride[1] = t->stride[2];
  t->shape[2] = s;
  t->stride[2] = st;
}

/* q and k as [B, H, T, D] from layout 0 ([B, H, T, D]), 1 ([B, T, H, D]) or
 * -1 (told by the shapes: the one under which q and k agree in batch and
 * tokens and int64 positions of [B, T], [1, T] or [T] have that many
 * tokens; when they cannot tell - both fit, neither does, or positions of
 * another kind - posenc._arrays.layout_of decides or raises). */
static void arg_layout(frame *f, long layout, targ *q, targ *k, PyObject *qo, PyObject *ko,
                       PyObject *positions) {
  if (f->failed || (q->src == SRC_NONE && k->src == SRC_NONE))
    return;
  if (layout < 0) {
    const pe_tensor *a = q->src != SRC_NONE ? &q->t : &k->t;
    const pe_tensor *b = q->src != SRC_NONE && k->src != SRC_NONE ? &k->t : NULL;
    long long t = last_extent(positions);
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
      layout = r ? PyLong_AsLong(r) : -1;
      Py_XDECREF(r);
      if (fail_if(f, layout < 0))
        return;
    }
  }
  if (layout == 1) {
    if (q->src != SRC_NONE)
      swap12(&q->t);
    if (k->src != SRC_NONE)
      swap12(&k->t);
  }
}

/* The first given of q and k. */
static const targ *first(const targ *q, const targ *k) { return q->src != SRC_NONE ? q : k; }

/* ---- entry points ------------------------------------------------------------ */

/* apply_rope_qk(cache, q, k, positions, flags, pool, dtype, layout) */
static PyObject *do_apply_rope_qk(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_apply_rope_qk, 8, 5);
  void *c = arg_cache(&f, a[0], "cache");
  targ *q = arg_tensor(&f, a[1], "q", a[6], OPTIONAL | WRITTEN, MAP_4D);
  targ *k = arg_tensor(&f, a[2], "k", a[6], OPTIONAL | WRITTEN, MAP_4D);
  arg_layout(&f, arg_long(&f, a[7]), q, k, a[1], a[2], a[3]);
  const int64_t *pos = arg_grid(&f, a[3], "positions", first(q, k), 0, 0);
  uint32_t flags = (uint32_t)arg_long(&f, a[4]);
  FINISH(F.pe_apply_rope_qk(c, P(q), P(k), pos, flags, f.pool));
}

/* rope_shift_k(cache, k, deltas, pool, dtype) */
static PyObject *do_rope_shift_k(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_rope_shift_k, 5, 3);
  void *c = arg_cache(&f, a[0], "cache");
  targ *k = arg_tensor(&f, a[1], "k", a[4], WRITTEN, MAP_4D);
  const int64_t *d = arg_grid(&f, a[2], "deltas", k, 0, 1);
  FINISH(F.pe_rope_shift_k(c, &k->t, d, f.pool));
}

/* rope_rerotate_k(from, to, k, positions, pool, dtype) */
static PyObject *do_rope_rerotate_k(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_rope_rerotate_k, 6, 4);
  void *from = arg_cache(&f, a[0], "from_cache"), *to = arg_cache(&f, a[1], "to_cache");
  targ *k = arg_tensor(&f, a[2], "k", a[5], WRITTEN, MAP_4D);
  const int64_t *pos = arg_grid(&f, a[3], "positions", k, 0, 0);
  FINISH(F.pe_rope_rerotate_k(from, to, &k->t, pos, f.pool));
}

/* apply_mrope_qk(cache, q, k, positions, s0, s1, s2, flags, pool, dtype) */
static PyObject *do_apply_mrope_qk(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_apply_mrope_qk, 10, 8);
  int32_t sec[3] = {(int32_t)arg_long(&f, a[4]), (int32_t)arg_long(&f, a[5]),
                    (int32_t)arg_long(&f, a[6])};
  void *c = arg_cache(&f, a[0], "cache");
  targ *q = arg_tensor(&f, a[1], "q", a[9], OPTIONAL | WRITTEN, MAP_4D);
  targ *k = arg_tensor(&f, a[2], "k", a[9], OPTIONAL | WRITTEN, MAP_4D);
  const int64_t *pos = arg_grid(&f, a[3], "positions", first(q, k), 3, 0);
  uint32_t flags = (uint32_t)arg_long(&f, a[7]);
  FINISH(F.pe_apply_mrope_qk(c, P(q), P(k), pos, sec, flags, f.pool));
}

/* apply_rope_qk_multi(caches, cache_index, q, k, positions, flags, pool, dtype) */
static PyObject *do_apply_rope_qk_multi(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_apply_rope_qk_multi, 8, 6);
  PyObject *seq = f.held = PySequence_Fast(a[0], "caches must be a sequence of posenc.RopeCache");
  if (!seq)
    return NULL;
  Py_ssize_t nc = PySequence_Fast_GET_SIZE(seq);
  const pe_rope_cache **caches = f.mem = PyMem_Calloc((size_t)(nc > 0 ? nc : 1), sizeof *caches);
  if (fail_if(&f, !caches))
    PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < nc && !f.failed; i++) {
    char name[32];
    snprintf(name, sizeof name, "caches[%zd]", i);
    caches[i] = arg_cache(&f, PySequence_Fast_GET_ITEM(seq, i), name);
  }
  targ *q = arg_tensor(&f, a[2], "q", a[7], OPTIONAL | WRITTEN, MAP_4D);
  targ *k = arg_tensor(&f, a[3], "k", a[7], OPTIONAL | WRITTEN, MAP_4D);
  int64_t batch = f.failed || first(q, k)->src == SRC_NONE ? 0 : first(q, k)->t.shape[0];
  iarg *idx = arg_vector(&f, a[1], G.int32_vector,
                         Py_BuildValue("(Lns)", (long long)batch, nc, "cache_index"), 'i',
                         batch, -1);
  const int64_t *pos = arg_grid(&f, a[4], "positions", first(q, k), 0, 0);
  uint32_t flags = (uint32_t)arg_long(&f, a[5]);
  FINISH(F.pe_apply_rope_qk_multi(caches, (int32_t)nc, idx->p, P(q), P(k), pos, flags,
                                   f.pool));
}

/* apply_rope_qk_store(cache, q, k, k_cache, slot_mapping, positions, flags, pool,
 *                     dtype, cache_dtype) */
static PyObject *do_apply_rope_qk_store(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_apply_rope_qk_store, 10, 7);
  void *c = arg_cache(&f, a[0], "cache");
  targ *q = arg_tensor(&f, a[1], "q", a[8], OPTIONAL | WRITTEN, MAP_4D);
  targ *k = arg_tensor(&f, a[2], "k", a[8], 0, MAP_4D);
  targ *kc = arg_tensor(&f, a[3], "k_cache", a[9], WRITTEN, MAP_SLOTS);
  const int64_t *slots = arg_grid(&f, a[4], "slot_mapping", k, 0, 0);
  const int64_t *pos = arg_grid(&f, a[5], "positions", k, 0, 0);
  uint32_t flags = (uint32_t)arg_long(&f, a[6]);
  FINISH(F.pe_apply_rope_qk_store(c, P(q), &k->t, &kc->t, slots, pos, flags, f.pool));
}

/* The norm of qk_norm_rope(_store) from (kind, scope, eps, q_weight,
 * k_weight): each weight a float32 [n] array (head_dim, or heads * head_dim
 * per token), else posenc._arrays.norm_weight, which converts or raises. */
static void arg_norm(frame *f, pe_qk_norm *norm, PyObject *const *a, const targ *q,
                     const targ *k) {
  F.pe_qk_norm_init(norm);
  norm->kind = (pe_qk_norm_kind)arg_long(f, a[0]);
  norm->scope = (pe_qk_norm_scope)arg_long(f, a[1]);
  norm->eps = (float)arg_double(f, a[2]);
  const targ *x = first(q, k);
  if (f->failed || x->src == SRC_NONE)
    return;
  int per_token = norm->scope == PE_QK_NORM_PER_TOKEN;
  const targ *xs[2] = {q, k};
  const float **w[2] = {&norm->q_weight, &norm->k_weight};
  for (int i = 0; i < 2; i++) {
    Py_ssize_t size = xs[i]->src == SRC_NONE ? 0
                      : (Py_ssize_t)(x->t.shape[3] * (per_token ? xs[i]->t.shape[1] : 1));
    const char *name = i ? "k_weight" : "q_weight";
    *w[i] = arg_vector(f, a[3 + i], G.weight, Py_BuildValue("(sni)", name, size, per_token), 'f',
                       size, -1)->p;
  }
}

/* qk_norm_rope(cache, q, k, kind, scope, eps, q_weight, k_weight, positions,
 *              flags, pool, dtype) */
static PyObject *do_qk_norm_rope(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_qk_norm_rope, 12, 10);
  if (need(F.pe_qk_norm_init, "pe_qk_norm_init"))
    return NULL;
  void *c = arg_cache(&f, a[0], "cache");
  targ *q = arg_tensor(&f, a[1], "q", a[11], OPTIONAL | WRITTEN, MAP_4D);
  targ *k = arg_tensor(&f, a[2], "k", a[11], OPTIONAL | WRITTEN, MAP_4D);
  pe_qk_norm norm;
  arg_norm(&f, &norm, a + 3, q, k);
  const int64_t *pos = arg_grid(&f, a[8], "positions", first(q, k), 0, 0);
  uint32_t flags = (uint32_t)arg_long(&f, a[9]);
  FINISH(F.pe_qk_norm_rope(c, &norm, P(q), P(k), pos, flags, f.pool));
}

/* qk_norm_rope_store(cache, q, k, v, k_cache, v_cache, slot_mapping, kind, scope,
 *   eps, q_weight, k_weight, positions, flags, pool, dtype, cache_dtype,
 *   v_cache_dtype) */
static PyObject *do_qk_norm_rope_store(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_qk_norm_rope_store, 18, 14);
  if (need(F.pe_qk_norm_init, "pe_qk_norm_init") || need(F.pe_kv_cache_init, "pe_kv_cache_init"))
    return NULL;
  void *c = arg_cache(&f, a[0], "cache");
  targ *q = arg_tensor(&f, a[1], "q", a[15], OPTIONAL | WRITTEN, MAP_4D);
  targ *k = arg_tensor(&f, a[2], "k", a[15], 0, MAP_4D);
  targ *v = arg_tensor(&f, a[3], "v", a[15], OPTIONAL, MAP_4D);
  pe_kv_cache kv;
  F.pe_kv_cache_init(&kv);
  kv.k = &arg_tensor(&f, a[4], "k_cache", a[16], WRITTEN, MAP_4D)->t;
  kv.v = P(arg_tensor(&f, a[5], "v_cache", a[17], OPTIONAL | WRITTEN, MAP_4D));
  pe_qk_norm norm;
  arg_norm(&f, &norm, a + 7, q, k);
  const int64_t *slots = arg_grid(&f, a[6], "slot_mapping", k, 0, 0);
  const int64_t *pos = arg_grid(&f, a[12], "positions", k, 0, 0);
  uint32_t flags = (uint32_t)arg_long(&f, a[13]);
  FINISH(F.pe_qk_norm_rope_store(c, &norm, P(q), &k->t, P(v), &kv, slots, pos, flags, f.pool));
}

/* alibi_add_bias(scores, slopes, q_positions, flags, pool, dtype) */
static PyObject *do_alibi_add_bias(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_alibi_add_bias, 6, 4);
  targ *s = arg_tensor(&f, a[0], "scores", a[5], WRITTEN, MAP_4D);
  Py_ssize_t heads = f.failed ? 0 : (Py_ssize_t)s->t.shape[1];
  iarg *slopes = arg_vector(&f, a[1], G.float_vector, Py_BuildValue("(ns)", heads, "slopes"),
                            'f', heads, -1);
  const int64_t *qp = arg_grid(&f, a[2], "q_positions", s, 0, 0);
  uint32_t flags = (uint32_t)arg_long(&f, a[3]);
  FINISH(F.pe_alibi_add_bias(&s->t, slopes->p, qp, flags, f.pool));
}

/* t5_add_bias(scores, table, bidirectional, num_buckets, max_distance, q_positions,
 *             flags, pool, dtype); num_buckets None = the table's rows */
static PyObject *do_t5_add_bias(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_t5_add_bias, 9, 7);
  targ *s = arg_tensor(&f, a[0], "scores", a[8], WRITTEN, MAP_4D);
  Py_ssize_t heads = f.failed ? 0 : (Py_ssize_t)s->t.shape[1];
  /* [num_buckets, heads] float32, else posenc._arrays.float_table */
  iarg *tab = arg_vector(&f, a[1], G.float_table, Py_BuildValue("(On)", a[3], heads), 'f',
                         a[3] == Py_None ? -1 : arg_long(&f, a[3]), heads);
  const int64_t *qp = arg_grid(&f, a[5], "q_positions", s, 0, 0);
  int bidir = (int)arg_long(&f, a[2]);
  int32_t buckets = f.failed ? 0 : (int32_t)tab->buf.shape[0];
  int32_t max_distance = (int32_t)arg_long(&f, a[4]);
  uint32_t flags = (uint32_t)arg_long(&f, a[6]);
  FINISH(F.pe_t5_add_bias(&s->t, tab->p, bidir, buckets, max_distance, qp, flags, f.pool));
}

/* sinusoidal_add(x, positions, base, flags, pool, dtype) */
static PyObject *do_sinusoidal_add(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_sinusoidal_add, 6, 4);
  targ *x = arg_tensor(&f, a[0], "x", a[5], WRITTEN, MAP_ROWS);
  const int64_t *pos = arg_grid(&f, a[1], "positions", x, 0, 0);
  double base = arg_double(&f, a[2]);
  uint32_t flags = (uint32_t)arg_long(&f, a[3]);
  FINISH(F.pe_sinusoidal_add(&x->t, pos, base, flags, f.pool));
}

/* learned_add(x, table, positions, pool, dtype, table_dtype) */
static PyObject *do_learned_add(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_learned_add, 6, 3);
  targ *x = arg_tensor(&f, a[0], "x", a[4], WRITTEN, MAP_ROWS);
  targ *t = arg_tensor(&f, a[1], "table", a[5], 0, MAP_TABLE);
  const int64_t *pos = arg_grid(&f, a[2], "positions", x, 0, 0);
  FINISH(F.pe_learned_add(&x->t, &t->t, pos, f.pool));
}

/* ---- multi-head latent attention -------------------------------------------- */

/* The pe_mla of a posenc.MLA: its ctypes structure (_c, read through its
 * buffer), whose kv_weight and scale point into arrays the object keeps. */
static void arg_mla(frame *f, PyObject *obj, pe_mla *m) {
  memset(m, 0, sizeof *m);
  if (f->failed)
    return;
  if (!PyObject_TypeCheck(obj, (PyTypeObject *)G.MLA)) {
    PyErr_Format(PyExc_TypeError, "mla must be a posenc.MLA, got %s", Py_TYPE(obj)->tp_name);
    fail_if(f, 1);
    return;
  }
  PyObject *c = PyObject_GetAttr(obj, S_c);
  Py_buffer b;
  if (fail_if(f, !c || PyObject_GetBuffer(c, &b, PyBUF_SIMPLE) < 0)) {
    Py_XDECREF(c);
    return;
  }
  int ok = b.len == (Py_ssize_t)sizeof(pe_mla);
  if (ok)
    memcpy(m, b.buf, sizeof *m);
  PyBuffer_Release(&b);
  Py_DECREF(c);
  if (fail_if(f, !ok))
    PyErr_SetString(PyExc_RuntimeError, "posenc: the MLAParams struct does not match pe_mla");
}

/* A byte cache (uint8) described as [N, 1, BS, X] (3-D or 4-D rows) or, for
 * PE_MLA_FP8_DS_V4, [1, 1, N, B] (2-D blocks of B bytes), made the
 * descriptor of m's format (posenc.h's pe_mla_rope_store): shape[3] the kv
 * row's channels, strides in bytes. 0, or 1 when posenc.mla's helper must
 * decide (it raises what does not fit). */
static int byte_rows(targ *a, const pe_mla *m, long block_size) {
  pe_tensor *t = &a->t;
  const int64_t ro = m->kv_rope_offset, R = m->rope_dim;
  if (ro < 0 || R < 0)
    return 1;
  switch (m->format) {
  case PE_MLA_FP8_E4M3: /* a byte per channel */
    return a->ndim < 3;
  case PE_MLA_FP8_DS: /* latent codes, a float32 scale per 128, the rope as bf16 */
    if (a->ndim < 3 || ro % 128 || t->shape[3] != ro + 4 * (ro / 128) + 2 * R)
      return 1;
    t->shape[3] = ro + R;
    return 0;
  case PE_MLA_FP8_DS_V4: { /* block_size rows of codes and bf16 rope, then their scales */
    const int64_t row = ro + 2 * R, per = row + ro / 64 + 1;
    if (a->ndim != 2 || block_size < 1 || ro % 64 || block_size > t->shape[3] / per)
      return 1;
    const int64_t n = t->shape[2], s0 = t->stride[2];
    const int64_t shape[4] = {n, 1, block_size, ro + R}, stride[4] = {s0, 0, row, 1};
    memcpy(t->shape, shape, sizeof shape);
    memcpy(t->stride, stride, sizeof stride);
    return 0;
  }
  default:
    return 1;
  }
}

/* The MLA cache of m's format: a float tensor (PE_MLA_PLAIN: [num_blocks,
 * block_size, kv_dim] or [num_blocks, 1, block_size, kv_dim]) or a uint8
 * one (byte_rows); anything else through posenc.mla.cache_view. */
static targ *arg_mla_cache(frame *f, PyObject *obj, const pe_mla *m, PyObject *mla,
                           PyObject *block_size, PyObject *dtype, int flags) {
  const int v4 = m->format == PE_MLA_FP8_DS_V4;
  if (f->failed || (m->format == PE_MLA_PLAIN && block_size == Py_None))
    return arg_tensor(f, obj, "mla_cache", dtype, flags, MAP_ROWS);
  targ *a = &f->t[f->nt++];
  a->src = SRC_NONE;
  a->ref = NULL;
  if (obj == Py_None && (flags & OPTIONAL))
    return a;
  long bs = block_size == Py_None ? 0 : PyLong_AsLong(block_size);
  if (bs == -1 && PyErr_Occurred()) {
    PyErr_Clear(); /* the helper names it */
    bs = 0;
  }
  /* block_size is read by fp8_ds_v4 only: given to another format, the helper refuses it */
  int r = v4 || block_size == Py_None ? tensor_fast(obj, DT_BYTES, flags & WRITTEN,
                                                    v4 ? MAP_TABLE : MAP_ROWS, a)
                                      : 1;
  if (r == 0 && byte_rows(a, m, bs)) {
    targ_release(a);
    r = 1;
  }
  if (r == 1)
    r = from_view(PyObject_CallFunction(G.mla_cache, "OsOOi", obj, "mla_cache", mla, block_size,
                                        flags & WRITTEN),
                  a);
  fail_if(f, r < 0);
  return a;
}

/* mla_rope_store(cache, mla, q, kv, mla_cache, slot_mapping, positions, pool, dtype,
 *                cache_dtype, block_size, layout, flags); layout 1: q is [B, T, H, D] */
static PyObject *do_mla_rope_store(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_mla_rope_store, 13, 7);
  void *c = arg_cache(&f, a[0], "cache");
  pe_mla m;
  arg_mla(&f, a[1], &m);
  targ *q = arg_tensor(&f, a[2], "q", a[8], OPTIONAL | WRITTEN, MAP_4D);
  targ *kv = arg_tensor(&f, a[3], "kv", a[8], OPTIONAL, MAP_ROWS);
  targ *mc = arg_mla_cache(&f, a[4], &m, a[1], a[10], a[9], OPTIONAL | WRITTEN);
  if (arg_long(&f, a[11]) == 1 && q->src != SRC_NONE)
    swap12(&q->t);
  const targ *x = kv->src != SRC_NONE ? kv : q; /* batch and tokens of the grids */
  const int64_t *slots = arg_grid(&f, a[5], "slot_mapping", x, 0, 0);
  const int64_t *pos = arg_grid(&f, a[6], "positions", x, 0, 0);
  const uint32_t flags = (uint32_t)arg_long(&f, a[12]);
  FINISH(F.pe_mla_rope_store(c, &m, P(q), P(kv), P(mc), slots, pos, flags, f.pool));
}

/* mla_cache_read(mla, mla_cache, out, slot_mapping, dtype, cache_dtype, block_size) */
static PyObject *do_mla_cache_read(PyObject *const *a, Py_ssize_t nargs, const timing *tm) {
  BEGIN(pe_mla_cache_read, 7, -1);
  pe_mla m;
  arg_mla(&f, a[0], &m);
  targ *mc = arg_mla_cache(&f, a[1], &m, a[0], a[6], a[5], 0);
  targ *out = arg_tensor(&f, a[2], "out", a[4], WRITTEN, MAP_ROWS);
  const int64_t *slots = arg_grid(&f, a[3], "slot_mapping", out, 0, 0);
  FINISH(F.pe_mla_cache_read(&m, &mc->t, &out->t, slots));
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
  X(learned_add) X(mla_rope_store) X(mla_cache_read)

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
      {"ThreadPool", &G.ThreadPool},   {"MLA", &G.MLA},
      {"PosencError", &G.PosencError},
      {"BusyError", &G.BusyError},     {"tensor", &G.tensor},
      {"int64_grid", &G.int64_grid},   {"mrope_positions", &G.mrope_positions},
      {"int32_vector", &G.int32_vector}, {"float_vector", &G.float_vector},
      {"float_table", &G.float_table}, {"weight", &G.weight},
      {"handle_of", &G.handle_of},     {"requested", &G.requested},
      {"missing", &G.missing},         {"layout_error", &G.layout_error},
      {"mla_cache", &G.mla_cache},
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
      {&S_ptr, "_ptr"}, {&S_t, "t"}, {&S_dlpack, "__dlpack__"}, {&S_torch, "torch"},
      {&S_c, "_c"},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (!*names[i].s && !(*names[i].s = PyUnicode_InternFromString(names[i].v)))
      return NULL;
  PyObject *m = PyModule_Create(&module);
  if (m && (PyModule_AddIntConstant(m, "SIZEOF_TENSOR", (long)sizeof(pe_tensor)) < 0 ||
            PyModule_AddIntConstant(m, "SIZEOF_MLA", (long)sizeof(pe_mla)) < 0 ||
            PyModule_AddStringConstant(m, "HEADER_VERSION", HEADER_VERSION) < 0)) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
