/* report.c - pe-bench's output: the table (narrow by default: one block
 * per suite and thread count with the columns that matter for it, fit for
 * a 120-column terminal; every column with --wide), --csv and --json (always
 * every field; scripts/bench-results.sh and the README's tables read the CSV
 * by these field names). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pe_bench.h"

void cpu_model(char *out, size_t len) {
  snprintf(out, len, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    if (!strncmp(line, "model name", 10)) {
      char *p = strchr(line, ':');
      if (p) {
        p++;
        while (*p == ' ') p++;
        p[strcspn(p, "\n")] = 0;
        snprintf(out, len, "%s", p);
      }
      break;
    }
  }
  fclose(f);
}

static void fmt_num(char *out, size_t len, double v, int digits) {
  if (isnan(v))
    snprintf(out, len, "-");
  else if (fabs(v) >= 100000)
    snprintf(out, len, "%.4g", v);
  else
    snprintf(out, len, "%.*f", digits, v);
}

static void fmt_ns(char *out, size_t len, double v) {
  if (isnan(v))
    snprintf(out, len, "-");
  else if (v >= 100)
    snprintf(out, len, "%.0f", v);
  else
    snprintf(out, len, "%.1f", v);
}

/* Every column, in --wide order. The README's Results tables use these
 * names (a subset: scripts/bench-results.sh writes them from --csv). */
enum {
  C_SUITE, C_CASE, C_SHAPE, C_DTYPE, C_ISA, C_THREADS, C_GBPS, C_NS, C_SPREAD, C_IQR, C_BOUND_GBPS,
  C_BOUND, C_FLOOR, C_XFLOOR, C_TEXTBOOK, C_NATIVE, C_1T, C_NOTE, N_COLS
};
static const char *const col_names[N_COLS] = {
    "suite", "case", "shape", "dtype", "isa", "threads", "GB/s", "ns/call (median)",
    "spread (min..max ns)", "IQR p25..p75 (% of median)", "bound GB/s", "x stream bound", "floor",
    "x floor", "x textbook loop", "x textbook-native", "x 1 thread", "note"};

/* x floor: the larger of the stream time and the floor over the kernel's. */
static double ratio_floor(const result *r) {
  return isnan(r->floor.med) ? NAN : fmax(r->bound.med, r->floor.med) / r->ns.med;
}
#define CELL 256

/* The row's remarks: why it is flagged, how often it was sampled, `shape`
 * (a shape not the block's; "" none), its note (or why it was not
 * measured). */
static void row_note(const result *r, const char *shape, char *out, size_t len) {
  if (r->error[0]) {
    snprintf(out, len, "%.200s", r->error);
    return;
  }
  char head[200] = ""; /* "! " the flag (160) " (sampled N times)" */
  if (r->flag[0]) snprintf(head, sizeof head, "! %.160s", r->flag);
  if (r->attempts > 1)
    snprintf(head + strlen(head), sizeof head - strlen(head), " (sampled %d times)", r->attempts);
  const char *part[3] = {head[0] == ' ' ? head + 1 : head, shape, r->note};
  size_t at = 0;
  out[0] = 0;
  for (int i = 0; i < 3; i++)
    if (part[i][0] && at < len)
      at += (size_t)snprintf(out + at, len - at, "%s%s", at ? "; " : "", part[i]);
}

static void result_cells(const result *r, char cells[N_COLS][CELL]) {
  snprintf(cells[C_SUITE], CELL, "%s", r->suite);
  snprintf(cells[C_CASE], CELL, "%s", r->name);
  snprintf(cells[C_SHAPE], CELL, "%s", r->shape[0] ? r->shape : "-");
  snprintf(cells[C_DTYPE], CELL, "%s", r->dtype);
  snprintf(cells[C_ISA], CELL, "%s", r->isa);
  snprintf(cells[C_THREADS], CELL, "%d", r->threads);
  for (int i = C_GBPS; i < N_COLS; i++) snprintf(cells[i], CELL, "-");
  row_note(r, "", cells[C_NOTE], CELL);
  if (r->error[0]) return;
  fmt_num(cells[C_GBPS], CELL, r->bytes / r->ns.med, 1);
  fmt_ns(cells[C_NS], CELL, r->ns.med);
  if (!isnan(r->ns.min) && r->ns.min != r->ns.max) {
    char a[32], b[32];
    fmt_ns(a, sizeof a, r->ns.min);
    fmt_ns(b, sizeof b, r->ns.max);
    snprintf(cells[C_SPREAD], CELL, "%.32s..%.32s", a, b);
  }
  fmt_num(cells[C_IQR], CELL, 100 * (r->ns.p75 - r->ns.p25) / r->ns.med, 0);
  if (!isnan(r->bound.med)) {
    fmt_num(cells[C_BOUND_GBPS], CELL, r->bytes / r->bound.med, 1);
    fmt_num(cells[C_BOUND], CELL, r->bound.med / r->ns.med, 2);
  }
  fmt_ns(cells[C_FLOOR], CELL, r->floor.med);
  fmt_num(cells[C_XFLOOR], CELL, ratio_floor(r), 2);
  fmt_num(cells[C_TEXTBOOK], CELL, r->textbook.med / r->ns.med, 2);
  fmt_num(cells[C_NATIVE], CELL, r->textbook_native.med / r->ns.med, 2);
  fmt_num(cells[C_1T], CELL, r->speedup_1t, 2);
}

/* lead then text, on lines of at most 120 columns broken at spaces, the
 * lines after the first indented by `indent` spaces. */
static void print_wrapped(const char *lead, int indent, const char *text) {
  int at = printf("%s", lead);
  for (const char *p = text; *p;) {
    size_t word = strcspn(p, " ");
    if (at > indent && at + 1 + (int)word > 120) {
      at = printf("\n%*s", indent, "") - 1;
    } else if (p != text) {
      putchar(' ');
      at++;
    }
    at += printf("%.*s", (int)word, p);
    p += word;
    while (*p == ' ') p++;
  }
  putchar('\n');
}

static int n_flagged(void) {
  int n = 0;
  for (int i = 0; i < n_results; i++) n += results[i].flag[0] != 0 && !results[i].error[0];
  return n;
}

static int is_numeric(int col) { return col >= C_THREADS && col < C_NOTE; }

/* Rows rows[0..n) in the columns cols[0..nc), headed by names[] (NULL:
 * col_names), notes[i] (when not NULL) in the note column: a markdown table,
 * or (plain) columns two spaces apart under a line of dashes. */
static void print_rows(const int *rows, int n, const int *cols, int nc, const char *const *names,
                       char (*const notes)[CELL], int plain) {
  int width[N_COLS];
  char cells[N_COLS][CELL];
  for (int j = 0; j < nc; j++) width[j] = (int)strlen(names ? names[j] : col_names[cols[j]]);
  for (int i = 0; i < n; i++) {
    result_cells(&results[rows[i]], cells);
    if (notes) snprintf(cells[C_NOTE], CELL, "%s", notes[i]);
    for (int j = 0; j < nc; j++)
      if ((int)strlen(cells[cols[j]]) > width[j]) width[j] = (int)strlen(cells[cols[j]]);
  }
  const char *sep = plain ? "  " : " | ", *open = plain ? "" : "| ", *close = plain ? "" : " |";
  /* plain: no spaces after the last column */
#define W(j) (plain && (j) == nc - 1 && !is_numeric(cols[j]) ? 0 : width[j])
  printf("%s", open);
  for (int j = 0; j < nc; j++)
    printf(is_numeric(cols[j]) && plain ? "%s%*s" : "%s%-*s", j ? sep : "", W(j),
           names ? names[j] : col_names[cols[j]]);
  printf("%s\n", close);
  for (int j = 0; j < nc; j++) {
    printf("%s", plain ? (j ? "  " : "") : "|");
    for (int k = 0; k < width[j] + (plain ? 0 : 2); k++)
      putchar(!plain && is_numeric(cols[j]) && k == width[j] + 1 ? ':' : '-');
  }
  printf("%s\n", plain ? "" : "|");
  for (int i = 0; i < n; i++) {
    result_cells(&results[rows[i]], cells);
    if (notes) snprintf(cells[C_NOTE], CELL, "%s", notes[i]);
    printf("%s", open);
    for (int j = 0; j < nc; j++)
      printf(is_numeric(cols[j]) ? "%s%*s" : "%s%-*s", j ? sep : "", W(j), cells[cols[j]]);
    printf("%s\n", close);
  }
#undef W
}

/* The narrow table: one block per suite and thread count, in run order,
 * titled with the shape most of its rows have (a row of another shape says
 * so in its note). Its columns: case, dtype, isa where the block's rows
 * ran on more than one path (--isa all), ns/call, x stream bound, and
 * where a row of the block has them x textbook (rope; x unfused for the
 * serving suites, whose baseline is the unfused sequence), x native,
 * x 1 thread; the remarks numbered under the block ('!' before the number:
 * the row was disturbed). */
static void print_narrow(void) {
  int *rows = calloc((size_t)n_results + 1, sizeof *rows);
  char(*notes)[CELL] = calloc((size_t)n_results + 1, sizeof *notes);
  char(*texts)[CELL] = calloc((size_t)n_results + 1, sizeof *texts);
  int *done = calloc((size_t)n_results + 1, sizeof *done);
  if (!rows || !notes || !texts || !done) abort();
  for (int first = 0; first < n_results; first++) {
    if (done[first]) continue;
    const result *f = &results[first];
    int n = 0;
    for (int i = first; i < n_results; i++)
      if (!done[i] && !strcmp(results[i].suite, f->suite) && results[i].threads == f->threads)
        rows[n++] = i, done[i] = 1;
    /* the block's shape: the one most of its rows have */
    const char *shape = f->shape;
    int best = 0, any[N_COLS] = {0};
    for (int i = 0; i < n; i++) {
      int same = 0;
      for (int j = 0; j < n; j++) same += !strcmp(results[rows[i]].shape, results[rows[j]].shape);
      if (same > best) best = same, shape = results[rows[i]].shape;
    }
    char cells[N_COLS][CELL];
    int paths = 0; /* rows of another path than the block's first (--isa all) */
    for (int i = 0; i < n; i++) {
      result_cells(&results[rows[i]], cells);
      for (int c = 0; c < N_COLS; c++) any[c] |= strcmp(cells[c], "-") != 0;
      paths |= strcmp(results[rows[i]].isa, f->isa) != 0;
    }
    /* numbered remarks: equal texts share a number */
    int n_texts = 0;
    for (int i = 0; i < n; i++) {
      const result *r = &results[rows[i]];
      char text[CELL];
      row_note(r, strcmp(r->shape, shape) ? r->shape : "", text, sizeof text);
      notes[i][0] = 0;
      if (!text[0]) continue;
      int k = 0;
      while (k < n_texts && strcmp(texts[k], text)) k++;
      if (k == n_texts) snprintf(texts[n_texts++], CELL, "%s", text);
      snprintf(notes[i], CELL, "%s%d", r->flag[0] && !r->error[0] ? "!" : "", k + 1);
    }
    int cols[N_COLS], nc = 0;
    const char *names[N_COLS];
    int serving = !strcmp(f->suite, "fused") || !strcmp(f->suite, "qknorm") ||
                  !strcmp(f->suite, "kvquant") || !strcmp(f->suite, "mla");
#define COL(c, name) (cols[nc] = (c), names[nc++] = (name))
    COL(C_CASE, "case");
    COL(C_DTYPE, "dtype");
    if (paths) COL(C_ISA, "isa");
    COL(C_NS, "ns/call");
    if (any[C_BOUND]) COL(C_BOUND, "x stream bound");
    if (any[C_FLOOR]) COL(C_FLOOR, "floor");
    if (any[C_XFLOOR]) COL(C_XFLOOR, "x floor");
    if (any[C_TEXTBOOK]) COL(C_TEXTBOOK, serving ? "x unfused" : "x textbook");
    if (any[C_NATIVE]) COL(C_NATIVE, "x native");
    if (any[C_1T]) COL(C_1T, "x 1 thread");
    if (n_texts) COL(C_NOTE, "note");
#undef COL
    printf("\n%s, %d thread%s%s%s\n", f->suite, f->threads, f->threads == 1 ? "" : "s",
           shape[0] ? ": " : "", shape);
    print_rows(rows, n, cols, nc, names, notes, 1);
    for (int k = 0; k < n_texts; k++) {
      char lead[16];
      snprintf(lead, sizeof lead, "  %d: ", k + 1);
      print_wrapped(lead, (int)strlen(lead), texts[k]);
    }
  }
  free(rows);
  free(notes);
  free(texts);
  free(done);
}

void print_table(const char *cpu, const char *cmdline) {
  char line[1024];
  /* --isa all: each row on its own path, its floor with that path's kernels */
  const int each_path = opt.isa && !strcmp(opt.isa, "all");
  snprintf(line, sizeof line, "pe-bench %s on %s, %ld CPUs; library path %s; command: %s",
           pe_version_string(), cpu, sysconf(_SC_NPROCESSORS_ONLN),
           each_path ? "each one this CPU runs (isa column)" : pe_isa_name(), cmdline);
  print_wrapped("", 2, line);
  char floor_words[256] = "";
  if (pb_floor_name)
    snprintf(floor_words, sizeof floor_words,
             " floor = the row's arithmetic on %s (%s kernels), x floor = "
             "max(bound, floor) / ns;",
             opt.floor_call ? "as many rows as the call has (--floor-data call)"
                            : "L1-resident data",
             each_path ? "each row's path's" : pb_floor_name);
  snprintf(line, sizeof line,
           "median of %d runs after %d warm-up; bound = in-place x=x*a+b over the same bytes, "
           "the faster of one stream and four, same threads, same run;%s load average %.2f at "
           "the end",
           opt.reps, opt.warmup, floor_words, load_average());
  print_wrapped("", 2, line);
  if (opt.fresh_cache != 1) {
    char k[64];
    if (opt.fresh_cache)
      snprintf(k, sizeof k, "%" PRId64, opt.fresh_cache);
    else
      snprintf(k, sizeof k, "K (per case: K calls write twice the last-level cache)");
    snprintf(line, sizeof line,
             "--fresh-cache: each call of a serving row, its unfused sequence and the bound's "
             "walks write cache rows last written %s calls before (cold, from memory), their "
             "sources warm",
             k);
    print_wrapped("", 2, line);
  }
  if (opt.wide) {
    int cols[N_COLS], *all = calloc((size_t)n_results + 1, sizeof *all);
    if (!all) abort();
    for (int c = 0; c < N_COLS; c++) cols[c] = c;
    for (int i = 0; i < n_results; i++) all[i] = i;
    printf("\n");
    print_rows(all, n_results, cols, N_COLS, NULL, NULL, 0);
    free(all);
  } else {
    print_narrow();
  }
  int nf = n_flagged();
  if (nf)
    snprintf(line, sizeof line,
             "! %d of %d rows measured while disturbed (the reason is in the note): the "
             "interquartile range of the samples (p75 - p25) above %.0f %% of the median, the "
             "1-minute load average or the run queue (runnable threads, sampled every "
             "repetition) above the %ld CPUs, or the calling thread waiting more than %.0f %% of "
             "the time for its CPU. Their figures are not the machine's: rerun on a quiet "
             "machine.",
             nf, n_results, 100 * FLAG_IQR, sysconf(_SC_NPROCESSORS_ONLN), 100 * FLAG_WAIT);
  else
    snprintf(line, sizeof line,
             "No row disturbed: every interquartile range (p75 - p25) within %.0f %% of the "
             "median, load average and run queue at most the CPU count, CPU waits under %.0f %%.",
             100 * FLAG_IQR, 100 * FLAG_WAIT);
  printf("\n");
  print_wrapped("", 0, line);
}

static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') printf("\\%c", *s);
    else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
    else putchar(*s);
  }
  putchar('"');
}

static void json_number(double v) {
  if (isnan(v) || isinf(v)) printf("null");
  else printf("%.6g", v);
}

void print_json(const char *cpu, const char *cmdline) {
  printf("{\"version\": ");
  json_string(pe_version_string());
  printf(", \"cpu\": ");
  json_string(cpu);
  printf(", \"isa\": ");
  json_string(pe_isa_name());
  printf(", \"floor_isa\": ");
  json_string(pb_floor_name ? pb_floor_name : "");
  printf(", \"floor_data\": ");
  json_string(opt.floor_call ? "call" : "l1");
  printf(", \"command\": ");
  json_string(cmdline);
  printf(", \"reps\": %d, \"warmup\": %d, \"loadavg\": ", opt.reps, opt.warmup);
  json_number(load_average());
  printf(",\n \"results\": [\n");
  for (int i = 0; i < n_results; i++) {
    const result *r = &results[i];
    printf("  {\"suite\": ");
    json_string(r->suite);
    printf(", \"case\": ");
    json_string(r->name);
    printf(", \"shape\": ");
    json_string(r->shape);
    printf(", \"dtype\": ");
    json_string(r->dtype);
    printf(", \"isa\": ");
    json_string(r->isa);
    printf(", \"threads\": %d", r->threads);
    if (r->error[0]) {
      printf(", \"error\": ");
      json_string(r->error);
    } else {
      printf(", \"bytes\": %.0f, \"gbps\": ", r->bytes);
      json_number(r->bytes / r->ns.med);
      printf(", \"ns_median\": ");
      json_number(r->ns.med);
      printf(", \"ns_min\": ");
      json_number(r->ns.min);
      printf(", \"ns_max\": ");
      json_number(r->ns.max);
      printf(", \"ns_p25\": ");
      json_number(r->ns.p25);
      printf(", \"ns_p75\": ");
      json_number(r->ns.p75);
      printf(", \"iqr_fraction\": ");
      json_number((r->ns.p75 - r->ns.p25) / r->ns.med);
      printf(", \"bound_ns_median\": ");
      json_number(r->bound.med);
      printf(", \"ratio_bound\": ");
      json_number(r->bound.med / r->ns.med);
      printf(", \"floor_ns_median\": ");
      json_number(r->floor.med);
      printf(", \"ratio_floor\": ");
      json_number(ratio_floor(r));
      printf(", \"textbook_ns_median\": ");
      json_number(r->textbook.med);
      printf(", \"ratio_textbook\": ");
      json_number(r->textbook.med / r->ns.med);
      printf(", \"textbook_native_ns_median\": ");
      json_number(r->textbook_native.med);
      printf(", \"ratio_textbook_native\": ");
      json_number(r->textbook_native.med / r->ns.med);
      printf(", \"speedup_vs_1_thread\": ");
      json_number(r->speedup_1t);
      printf(", \"note\": ");
      json_string(r->note);
      printf(", \"loadavg_max\": ");
      json_number(r->load_max);
      printf(", \"cpu_wait_fraction\": ");
      json_number(r->wait_frac);
      printf(", \"run_queue_mean\": ");
      json_number(r->run_queue);
      printf(", \"flag\": ");
      json_string(r->flag);
    }
    printf("}%s\n", i + 1 < n_results ? "," : "");
  }
  printf(" ]}\n");
}

static void csv_field(const char *s) {
  if (strpbrk(s, ",\"\n")) {
    putchar('"');
    for (; *s; s++) {
      if (*s == '"') putchar('"');
      putchar(*s);
    }
    putchar('"');
  } else {
    fputs(s, stdout);
  }
}

void print_csv(void) {
  printf("suite,case,dtype,isa,threads,bytes,gbps,ns_median,ns_min,ns_max,ns_p25,ns_p75,"
         "iqr_fraction,bound_ns_median,ratio_bound,textbook_ns_median,ratio_textbook,"
         "textbook_native_ns_median,ratio_textbook_native,speedup_vs_1_thread,note,"
         "loadavg_max,cpu_wait_fraction,run_queue_mean,flag,shape,floor_ns_median,ratio_floor\n");
  for (int i = 0; i < n_results; i++) {
    const result *r = &results[i];
    csv_field(r->suite), putchar(',');
    csv_field(r->name), putchar(',');
    csv_field(r->dtype), putchar(',');
    csv_field(r->isa), putchar(',');
    printf("%d,", r->threads);
    if (r->error[0]) {
      printf(",,,,,,,,,,,,,,,");
      csv_field(r->error);
      printf(",,,,");
    } else {
      double v[14] = {r->bytes / r->ns.med, r->ns.med, r->ns.min, r->ns.max, r->ns.p25, r->ns.p75,
                      (r->ns.p75 - r->ns.p25) / r->ns.med, r->bound.med, r->bound.med / r->ns.med,
                      r->textbook.med, r->textbook.med / r->ns.med, r->textbook_native.med,
                      r->textbook_native.med / r->ns.med, r->speedup_1t};
      printf("%.0f,", r->bytes);
      for (int j = 0; j < 14; j++) {
        if (!isnan(v[j])) printf("%.6g", v[j]);
        putchar(',');
      }
      csv_field(r->note);
      putchar(',');
      if (!isnan(r->load_max)) printf("%.2f", r->load_max);
      putchar(',');
      if (!isnan(r->wait_frac)) printf("%.4f", r->wait_frac);
      putchar(',');
      if (!isnan(r->run_queue)) printf("%.2f", r->run_queue);
      putchar(',');
      csv_field(r->flag);
    }
    putchar(',');
    csv_field(r->shape);
    double fl[2] = {r->floor.med, r->error[0] ? NAN : ratio_floor(r)};
    for (int j = 0; j < 2; j++) {
      putchar(',');
      if (!isnan(fl[j])) printf("%.6g", fl[j]);
    }
    putchar('\n');
  }
}
