/* config_fixture.h - what the config-loader tests share: reading a
 * tests/data/configs file exactly (no NUL terminator added, so a loader that
 * reads past len shows under ASan), transformers' YaRN range and the
 * model loaders' calls. */
#ifndef PE_TEST_CONFIG_FIXTURE_H
#define PE_TEST_CONFIG_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h" /* ulp_f32 */

/* The bytes of tests/data/configs/<name>, exactly len of them (malloc'd to
 * the size). */
static inline char *read_fixture(const char *name, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/configs/%s", PE_TEST_DATA_DIR, name);
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n);
  assert_non_null(buf);
  assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

#define CONFIG_PI 3.14159265358979323846

/* transformers' _compute_yarn_parameters: d/2 frequencies into inv, the
 * correction range into *lo, *hi (floor / ceil when truncate, then the clamps
 * and the 0.001 guard). */
static inline void yarn_range(int d, double base, double m0, double bf, double bs, int truncate,
                              double *lo_out, double *hi_out) {
  double lo = d * log(m0 / (bf * 2.0 * CONFIG_PI)) / (2.0 * log(base));
  double hi = d * log(m0 / (bs * 2.0 * CONFIG_PI)) / (2.0 * log(base));
  if (truncate) {
    lo = floor(lo);
    hi = ceil(hi);
  }
  lo = fmax(lo, 0.0);
  hi = fmin(hi, (double)(d - 1));
  if (lo == hi) hi += 0.001;
  *lo_out = lo;
  *hi_out = hi;
}

static inline void ref_yarn_range(int d, double base, double s, double m0, double bf, double bs,
                                  int truncate, double *inv, double *lo_out, double *hi_out) {
  double lo, hi;
  yarn_range(d, base, m0, bf, bs, truncate, &lo, &hi);
  for (int i = 0; i < d / 2; i++) {
    double r = fmin(fmax((i - lo) / (hi - lo), 0.0), 1.0);
    double pf = pow(base, (double)(2 * i) / d);
    inv[i] = 1.0 / (s * pf) * r + 1.0 / pf * (1.0 - r);
  }
  *lo_out = lo;
  *hi_out = hi;
}

/* pe_model_rope_from_hf_config refuses json with status want and a sentence
 * holding needle; out stays NULL. */
static inline void expect_model_refused(const char *json, uint32_t flags, pe_status want,
                                        const char *needle) {
  pe_model_rope *out = NULL;
  pe_status st = pe_model_rope_from_hf_config(json, strlen(json), 0, 0, flags, &out);
  if (st != want || !strstr(pe_last_error(), needle))
    fail_msg("%s: got %s / %s, expected %s naming \"%s\"", json, pe_status_string(st),
             pe_last_error(), pe_status_string(want), needle);
  assert_null(out);
}

/* pe_model_rope_from_hf_config on a fixture / on text (table-less), failing
 * the test with the library's sentence. */
static inline pe_model_rope *model_file(const char *name) {
  size_t len;
  char *buf = read_fixture(name, &len);
  pe_model_rope *m = NULL;
  pe_status st = pe_model_rope_from_hf_config(buf, len, 0, 0, 0, &m);
  free(buf);
  if (st != PE_OK) fail_msg("%s: %s / %s", name, pe_status_string(st), pe_last_error());
  return m;
}

static inline pe_model_rope *model_text(const char *json, uint32_t flags) {
  pe_model_rope *m = NULL;
  pe_status st = pe_model_rope_from_hf_config(json, strlen(json), 0, 0, flags, &m);
  if (st != PE_OK) fail_msg("%s / %s for\n%s", pe_status_string(st), pe_last_error(), json);
  return m;
}

#endif
