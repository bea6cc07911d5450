/* fuzz_rope_cache.c - pe_rope_cache_create with any parameters (every
 * scaling type, factor arrays, edge sizes, struct sizes), then every cache
 * accessor with exact-size, canary-guarded outputs. */
#include "fuzz_rope_params.h"

static const char FN[] = "pe_rope_cache_create";

/* n floats with FZ_GUARD canary bytes on both sides. */
static float *guarded_floats(fz_arena *a, size_t n) {
  return fz_guarded(a, n * sizeof(float), n * sizeof(float), 0x5eed);
}

static void check_accessors(fz *f, pe_rope_cache *c) {
  pe_rope_params got;
  pe_rope_params_init(&got);
  if (pe_rope_cache_params(c, &got) != PE_OK) fz_die("pe_rope_cache_params", "failed on a cache");
  int32_t half = got.rotary_dim / 2;
  if (got.rotary_dim < 2 || got.rotary_dim > got.head_dim || (got.rotary_dim & 1))
    fz_die(FN, "created a cache with an invalid rotary_dim");

  /* pe_rope_cache_params with an older caller's struct_size writes only that
   * many bytes. */
  {
    fz_arena a;
    if (!fz_arena_alloc(&a, sizeof(pe_rope_params), 7)) return;
    uint32_t n = (uint32_t)fz_range(f, 0, sizeof(pe_rope_params));
    pe_rope_params *out = (pe_rope_params *)(void *)(a.mem + FZ_GUARD);
    memcpy(out, &n, sizeof n); /* struct_size is the first field */
    memset(a.mask + FZ_GUARD, 1, n);
    fz_arena_snapshot(&a);
    fz_set_sentinel();
    pe_status st = pe_rope_cache_params(c, out);
    if (st != PE_OK) fz_check_error_message("pe_rope_cache_params", st);
    if (st == PE_OK && n < offsetof(pe_rope_params, max_positions) + sizeof(int64_t))
      fz_die("pe_rope_cache_params", "accepted a struct_size below the oldest layout");
    fz_arena_check(&a, st, "pe_rope_cache_params");
    fz_arena_free(&a);
  }

  double af = pe_rope_cache_attention_factor(c), ss = pe_rope_cache_softmax_scale(c);
  if (!isfinite(af) || af <= 0) fz_die(FN, "attention factor not finite and positive");
  if (!isfinite(ss)) fz_die(FN, "softmax scale not finite");

  fz_arena a, b;
  float *inv = guarded_floats(&a, (size_t)half);
  if (inv) {
    if (pe_rope_cache_inv_freq(c, inv) != PE_OK) fz_die("pe_rope_cache_inv_freq", "failed");
    fz_arena_check_mask(&a, "pe_rope_cache_inv_freq");
    fz_arena_free(&a);
  }

  float *cs = guarded_floats(&a, (size_t)half), *sn = guarded_floats(&b, (size_t)half);
  if (cs && sn) {
    for (int i = 0; i < 3; i++) {
      int64_t pos = i == 0 ? fz_range(f, 0, got.max_positions > 0 ? got.max_positions - 1 : 1000000)
                           : fz_edge_i64(f);
      int bad = pos < 0 || pos >= ((int64_t)1 << 53) || (got.max_positions > 0 && pos >= got.max_positions);
      fz_set_sentinel();
      pe_status st = pe_rope_cache_cos_sin(c, pos, cs, sn);
      if (st != PE_OK) {
        fz_check_error_message("pe_rope_cache_cos_sin", st);
        fz_arena_check_unchanged(&a, "pe_rope_cache_cos_sin");
        fz_arena_check_unchanged(&b, "pe_rope_cache_cos_sin");
        continue;
      }
      if (bad) fz_die("pe_rope_cache_cos_sin", "accepted an out-of-range position");
      fz_arena_check_mask(&a, "pe_rope_cache_cos_sin");
      fz_arena_check_mask(&b, "pe_rope_cache_cos_sin");
      /* |cos|, |sin| <= attention factor (plus rounding). */
      for (int32_t j = 0; j < half; j++)
        if (!(fabsf(cs[j]) <= (float)af * 1.0001f + 1e-30f) ||
            !(fabsf(sn[j]) <= (float)af * 1.0001f + 1e-30f))
        {
          char msg[200];
          snprintf(msg, sizeof msg, "pos %lld j %d: cos %g sin %g > attention factor %g",
                   (long long)pos, (int)j, (double)cs[j], (double)sn[j], af);
          fz_die("pe_rope_cache_cos_sin", msg);
        }
      fz_arena_snapshot(&a);
      fz_arena_snapshot(&b);
    }
  }
  fz_arena_free(&a);
  fz_arena_free(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  (void)fz_choose(&f);
  fz_rope_arrays arr;
  pe_rope_params *p = fz_rope_params(&f, &arr, 0, 1);
  if (!p) {
    fz_rope_arrays_free(&arr);
    return 0;
  }
  int null_out = (fz_u8(&f) & 63) == 0;
  pe_rope_cache *sentinel = (pe_rope_cache *)(uintptr_t)0x5151, *c = sentinel;
  int must_fail = null_out || fz_params_bad_tail(p) ||
                  p->struct_size < offsetof(pe_rope_params, max_positions) + sizeof(int64_t) ||
                  ((unsigned)p->scaling > PE_ROPE_SCALING_CUSTOM &&
                   p->struct_size > offsetof(pe_rope_params, scaling)) ||
                  (p->style != PE_ROPE_NEOX && p->style != PE_ROPE_GPTJ &&
                   p->struct_size > offsetof(pe_rope_params, style));
  if (getenv("FZ_VERBOSE")) /* reproducing a finding: print the parameters */
    fprintf(stderr,
            "params: size %u head_dim %d rotary_dim %d style %d base %.17g max_positions %lld "
            "scaling %d factor %.17g orig %lld seq_len %lld attn %.17g beta %.17g/%.17g "
            "mscale %.17g/%.17g truncate %d low/high %.17g/%.17g arrays %p %p %p\n",
            p->struct_size, p->head_dim, p->rotary_dim, (int)p->style, p->base,
            (long long)p->max_positions, (int)p->scaling, p->factor,
            (long long)p->original_max_positions, (long long)p->seq_len, p->attention_factor,
            p->beta_fast, p->beta_slow, p->mscale, p->mscale_all_dim, p->truncate,
            p->low_freq_factor, p->high_freq_factor, (const void *)p->short_factor,
            (const void *)p->long_factor, (const void *)p->inv_freq);
  fz_set_sentinel();
  pe_status st = pe_rope_cache_create(p, null_out ? NULL : &c);
  if (st != PE_OK) {
    fz_check_error_message(FN, st);
    if (c != sentinel) fz_die(FN, "failed but changed *out");
  } else {
    if (must_fail) fz_die(FN, "accepted parameters the API requires it to refuse");
    if (!c || c == sentinel) fz_die(FN, "succeeded without a cache");
    check_accessors(&f, c);
    pe_rope_cache_destroy(c);
  }
  fz_rope_arrays_free(&arr);
  return 0;
}
