// gbench.cc - the RoPE kernels under Google Benchmark, for readers who trust
// that harness more than pe-bench. A small C++ shim over the C API; one
// benchmark per ISA (pe_force_isa), reported as skipped where this CPU or
// build lacks it. Bytes processed = bytes read + written, as in pe-bench.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "posenc.h"

namespace {

// Llama-3-8B attention: 32 query heads, 8 key heads, head_dim 128, NeoX.
constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128;

size_t DtypeSize(pe_dtype d) { return d == PE_F32 ? 4 : 2; }

// Owns a [1, heads, tokens, head_dim] tensor filled with small values.
class Tensor {
 public:
  Tensor(pe_dtype dt, int64_t heads, int64_t tokens) : bytes_(heads * tokens * kHeadDim * DtypeSize(dt)) {
    buf_.resize(bytes_);
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (size_t i = 0; i < bytes_ / DtypeSize(dt); i++) {
      float f = u(rng);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      if (dt == PE_F32) {
        std::memcpy(&buf_[i * 4], &f, 4);
      } else {
        // bf16: the top half of the float; f16: sign, a small exponent, mantissa bits.
        uint16_t h = dt == PE_BF16 ? uint16_t(bits >> 16)
                                   : uint16_t(((bits >> 16) & 0x8000) | 0x3800 | ((bits >> 13) & 0x3ff));
        std::memcpy(&buf_[i * 2], &h, 2);
      }
    }
    std::memset(&t_, 0, sizeof t_);
    t_.data = buf_.data();
    t_.dtype = dt;
    t_.shape[0] = 1, t_.shape[1] = heads, t_.shape[2] = tokens, t_.shape[3] = kHeadDim;
    t_.stride[0] = heads * tokens * kHeadDim, t_.stride[1] = tokens * kHeadDim, t_.stride[2] = kHeadDim;
    t_.stride[3] = 1;
  }
  const pe_tensor *get() const { return &t_; }
  size_t bytes() const { return bytes_; }

 private:
  size_t bytes_;
  std::vector<unsigned char> buf_;
  pe_tensor t_;
};

class Cache {
 public:
  explicit Cache(int64_t max_positions) {
    pe_rope_params p;
    pe_rope_params_init(&p);
    p.head_dim = kHeadDim;
    p.base = 500000.0;
    p.max_positions = max_positions;
    if (pe_rope_cache_create(&p, &c_) != PE_OK) c_ = nullptr;
  }
  ~Cache() { pe_rope_cache_destroy(c_); }
  Cache(const Cache &) = delete;
  Cache &operator=(const Cache &) = delete;
  const pe_rope_cache *get() const { return c_; }

 private:
  pe_rope_cache *c_ = nullptr;
};

void BM_Rope(benchmark::State &state, const std::string &isa, pe_dtype dt, int64_t tokens,
             int threads) {
  if (pe_force_isa(isa.c_str()) != PE_OK) {
    state.SkipWithError((isa + ": " + pe_last_error()).c_str());
    return;
  }
  pe_threadpool *pool = nullptr;  // 1 thread: the caller alone, no pool
  if (threads > 1 && pe_threadpool_create(threads, &pool) != PE_OK) {
    state.SkipWithError(pe_last_error());
    return;
  }
  Cache cache(tokens > 8192 ? tokens : 8192);
  Tensor q(dt, kHeads, tokens), k(dt, kKvHeads, tokens);
  int64_t pos = 4000;  // decode: a token past a long context; prefill: 0..T-1
  const int64_t *positions = tokens == 1 ? &pos : nullptr;
  if (!cache.get() || pe_apply_rope_qk(cache.get(), q.get(), k.get(), positions, 0, pool) != PE_OK) {
    state.SkipWithError(pe_last_error());
    pe_threadpool_destroy(pool);
    return;
  }
  for (auto _ : state) {
    pe_apply_rope_qk(cache.get(), q.get(), k.get(), positions, 0, pool);
    benchmark::ClobberMemory();
  }
  pe_threadpool_destroy(pool);
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(2 * (q.bytes() + k.bytes())));
  state.SetLabel(pe_isa_name());
}

void BM_TableBuild(benchmark::State &state, const std::string &isa) {
  if (pe_force_isa(isa.c_str()) != PE_OK) {
    state.SkipWithError((isa + ": " + pe_last_error()).c_str());
    return;
  }
  pe_rope_params p;
  pe_rope_params_init(&p);
  p.head_dim = kHeadDim;
  p.max_positions = 131072;
  for (auto _ : state) {
    pe_rope_cache *c = nullptr;
    if (pe_rope_cache_create(&p, &c) != PE_OK) {
      state.SkipWithError(pe_last_error());
      break;
    }
    benchmark::DoNotOptimize(c);
    pe_rope_cache_destroy(c);
  }
  // (position, frequency) pairs per second
  state.SetItemsProcessed(int64_t(state.iterations()) * 131072 * (kHeadDim / 2));
}

}  // namespace

int main(int argc, char **argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const char *isas[] = {"scalar", "avx2", "avx512", "avx512bf16", "neon"};
  struct {
    const char *name;
    pe_dtype dt;
    int64_t tokens;
  } cases[] = {{"decode/f32", PE_F32, 1},        {"prefill32/f32", PE_F32, 32},
               {"prefill512/f32", PE_F32, 512},  {"prefill512/f16", PE_F16, 512},
               {"prefill512/bf16", PE_BF16, 512}, {"prefill4096/f32", PE_F32, 4096}};
  for (const char *isa : isas) {
    std::string s(isa);
    for (const auto &c : cases)
      benchmark::RegisterBenchmark(("rope/llama3-8b/" + std::string(c.name) + "/" + s).c_str(), BM_Rope,
                                   s, c.dt, c.tokens, 1);
    // The pool on the prefill shape: wall time is what a pool changes.
    benchmark::RegisterBenchmark(("rope/llama3-8b/prefill512/f32/2threads/" + s).c_str(), BM_Rope, s,
                                 PE_F32, int64_t(512), 2)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("table/131072x64/" + s).c_str(), BM_TableBuild, s)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
