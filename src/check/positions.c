/* positions.c - the checks of the index arrays a call is given: positions
 * (one checker for every entry point: RoPE caches, multi-axis rows, score
 * queries, absolute embeddings), deltas, and slot mappings (check.h). */
#include <inttypes.h>
#include <stdio.h>

#include "check/check.h"

/* The sentence of a position error; formatted only when there is one. t < 0:
 * positions NULL, which stands for 0..tokens-1 (v = tokens - 1). */
static pe_status position_error(const pe__pos_check *c, int64_t v, int64_t b, int64_t t,
                                pe__pos_bound bound, int32_t ci) {
  char what[128];
  if (!bound.what)
    snprintf(what, sizeof what, "2^53 (not exact in double)");
  else if (c->owner && c->index)
    snprintf(what, sizeof what, "%s %d %s %" PRId64, c->owner, (int)ci, bound.what, bound.limit);
  else if (c->owner)
    snprintf(what, sizeof what, "%s %s %" PRId64, c->owner, bound.what, bound.limit);
  else
    snprintf(what, sizeof what, "%s %" PRId64, bound.what, bound.limit);
  if (t < 0)
    return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE, "%s: %ss NULL means 0..%" PRId64 ", past %s",
                    c->fn, c->name, v, what);
  if (v < 0)
    return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE,
                    "%s: %s %" PRId64 " at [%sbatch %" PRId64 ", token %" PRId64 "] is negative",
                    c->fn, c->name, v, c->axis, b, t);
  return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE,
                  "%s: %s %" PRId64 " at [%sbatch %" PRId64 ", token %" PRId64 "] >= %s", c->fn,
                  c->name, v, c->axis, b, t, what);
}

pe_status pe__check_positions(const pe__pos_check *c) {
  if (!c->pos && !c->null_is_index) return PE_OK;
  pe__pos_bound bound = c->bound;
  /* NULL positions (0..tokens-1) under one bound: one comparison, not one
   * per batch row (an empty call may have any batch) */
  if (!c->pos && !c->bound_of)
    return c->batch > 0 && c->tokens > bound.limit
               ? position_error(c, c->tokens - 1, 0, -1, bound, 0)
               : PE_OK;
  int32_t ci = 0, bound_ci = -1;
  for (int64_t b = 0; b < c->batch; b++) {
    if (c->bound_of) { /* the row's cache's bound, looked up when it changes */
      ci = c->index ? c->index[b] : 0;
      if (ci != bound_ci) bound = c->bound_of(c->items[bound_ci = ci]);
    }
    const int64_t limit = bound.limit;
    if (!c->pos) {
      if (c->tokens > limit) return position_error(c, c->tokens - 1, b, -1, bound, ci);
      continue;
    }
    const int64_t *row = c->pos + b * c->tokens;
    for (int64_t t = 0; t < c->tokens; t++)
      if (row[t] < 0 || row[t] >= limit) return position_error(c, row[t], b, t, bound, ci);
  }
  return PE_OK;
}

pe_status pe__check_deltas(const char *fn, const int64_t *d, int64_t batch, int64_t tokens) {
  if (!d) return pe__fail(PE_ERR_NULL_POINTER, "%s: deltas is NULL", fn);
  for (int64_t b = 0; b < batch; b++)
    for (int64_t t = 0; t < tokens; t++) {
      int64_t v = d[b * tokens + t];
      if (v <= -PE_MAX_POSITION || v >= PE_MAX_POSITION)
        return pe__fail(PE_ERR_POSITION_OUT_OF_RANGE,
                        "%s: delta %" PRId64 " at [batch %" PRId64 ", token %" PRId64
                        "] has magnitude >= 2^53",
                        fn, v, b, t);
    }
  return PE_OK;
}

/* ---- slot mappings ---- */

/* A run of consecutive tokens whose slots are consecutive: [lo, hi) slots,
 * starting at flat token index `first`. Prefill slot mappings are a few runs
 * (one per cache block), so duplicates are looked for among runs. */
typedef struct slot_run {
  int64_t lo, hi, first;
} slot_run;

/* The next run at or after flat token u (slots -1 skipped); returns the flat
 * index after it, or n when there is none (r->lo = -1). */
static int64_t next_run(const int64_t *slots, int64_t n, int64_t u, slot_run *r) {
  while (u < n && slots[u] < 0) u++;
  r->lo = -1;
  if (u >= n) return n;
  r->lo = slots[u];
  r->first = u;
  int64_t v = u + 1;
  while (v < n && slots[v] == slots[v - 1] + 1) v++;
  r->hi = r->lo + (v - u);
  return v;
}

static void sift_down(slot_run *a, int64_t i, int64_t n) {
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && a[c + 1].lo > a[c].lo) c++;
    if (a[c].lo <= a[i].lo) return;
    slot_run t = a[i];
    a[i] = a[c];
    a[c] = t;
    i = c;
  }
}

/* Heapsort by lo: in place, no allocation (qsort may allocate). */
static void sort_runs(slot_run *a, int64_t n) {
  for (int64_t i = n / 2 - 1; i >= 0; i--) sift_down(a, i, n);
  for (int64_t e = n - 1; e > 0; e--) {
    slot_run t = a[0];
    a[0] = a[e];
    a[e] = t;
    sift_down(a, 0, e);
  }
}

static pe_status duplicate_error(const char *fn, int64_t tokens, const slot_run *x,
                                 const slot_run *y) {
  int64_t s = x->lo > y->lo ? x->lo : y->lo; /* the first slot both runs hold */
  int64_t ux = x->first + (s - x->lo), uy = y->first + (s - y->lo);
  if (ux > uy) {
    int64_t t = ux;
    ux = uy;
    uy = t;
  }
  return pe__fail(PE_ERR_INVALID_ARGUMENT,
                  "%s: slot_mapping has slot %" PRId64 " twice, at [batch %" PRId64
                  ", token %" PRId64 "] and [batch %" PRId64 ", token %" PRId64
                  "] (the stored key would depend on the order of writes)",
                  fn, s, ux / tokens, ux % tokens, uy / tokens, uy % tokens);
}

/* Runs sorted per group of RUNS_CAP on the stack; each group is checked
 * within itself and against every later run by binary search. One group (one
 * pass) for any realistic mapping; a pathological one costs a pass per group. */
#define RUNS_CAP 512

pe_status pe__check_slots(const char *fn, const int64_t *slots, int64_t batch, int64_t tokens,
                          int64_t n_slots, int distinct) {
  if (!slots) return pe__fail(PE_ERR_NULL_POINTER, "%s: slot_mapping is NULL", fn);
  int64_t n = batch * tokens;
  for (int64_t u = 0; u < n; u++)
    if (slots[u] < -1 || slots[u] >= n_slots)
      return pe__fail(PE_ERR_INVALID_ARGUMENT,
                      "%s: slot_mapping %" PRId64 " at [batch %" PRId64 ", token %" PRId64
                      "] is outside [0, %" PRId64 ") (num_blocks * block_size of the cache; -1 skips the token)",
                      fn, slots[u], u / tokens, u % tokens, n_slots);
  if (!distinct) return PE_OK;
  if (n <= 16) { /* a decode step: every pair, no sort */
    for (int64_t u = 1; u < n; u++)
      for (int64_t v = 0; v < u; v++)
        if (slots[u] >= 0 && slots[u] == slots[v]) {
          slot_run x = {slots[v], slots[v] + 1, v}, y = {slots[u], slots[u] + 1, u};
          return duplicate_error(fn, tokens, &x, &y);
        }
    return PE_OK;
  }
  slot_run g[RUNS_CAP];
  for (int64_t group_start = 0;;) { /* group_start: flat index where the group's runs begin */
    int64_t m = 0, u = group_start;
    slot_run r;
    while (m < RUNS_CAP) {
      u = next_run(slots, n, u, &r);
      if (r.lo < 0) break;
      g[m++] = r;
    }
    if (m == 0) return PE_OK;
    sort_runs(g, m);
    for (int64_t i = 1; i < m; i++)
      if (g[i].lo < g[i - 1].hi) return duplicate_error(fn, tokens, &g[i - 1], &g[i]);
    /* Later runs against the group: the last run starting before r.hi. */
    for (int64_t v = u;;) {
      v = next_run(slots, n, v, &r);
      if (r.lo < 0) break;
      int64_t a = 0, b = m; /* first index with lo >= r.hi */
      while (a < b) {
        int64_t mid = a + (b - a) / 2;
        if (g[mid].lo < r.hi) a = mid + 1;
        else b = mid;
      }
      if (a > 0 && g[a - 1].hi > r.lo) return duplicate_error(fn, tokens, &g[a - 1], &r);
    }
    if (u >= n) return PE_OK;
    group_start = u;
  }
}

