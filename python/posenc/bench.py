"""What a Python call costs over the C call it makes:
python -m posenc.bench [--reps N] [--rounds R] [--clock cpu|wall]
                       [--case decode,prefill] [--dtype f32,bf16]
                       [--arrays numpy,torch] [--op rope,...]

For each case, dtype, kind of array and entry point, on the same arrays:
  C       the C function alone: posenc._posenc.timed() describes the arrays
          once and calls the library --reps times in a C loop (GIL released);
  Python  the public Python function called --reps times from a Python loop
          (what an engine pays once per layer and step);
  over    Python - C: the binding's cost per call (and in % of C).
Both are the fastest of --rounds rounds, the two alternated within each round
so that a busy machine slows both alike, on the calling thread's CPU time
(--clock cpu, the default: what the calls cost, not the time the thread
waited for a core on a shared machine) or the wall clock (--clock wall). The
in-place calls rotate the same arrays again and again (as pe-bench does); the
values do not matter.

Cases: decode, 4 sequences of one token; prefill, one sequence of 512 - both
with Llama-3.1-8B's heads (32 query, 8 key/value heads, head_dim 128), q and
k views of one packed QKV projection [batch, tokens, (32 + 2*8) * 128] as an
engine has them, positions an int64 [batch, tokens] array, one thread.
The MLA calls (mla, mla_fp8_ds, torch.mla_rope_store_) have DeepSeek-V3's
shapes instead: 128 q heads of 192 (q_b_proj's output viewed as [batch,
tokens, heads, 192]), kv rows of 576, a paged cache of 576-channel rows
(plain, in the case's dtype) or 656-byte rows (fp8_ds), YaRN rope of 64.
"""
import argparse
import os
import platform
import time

import numpy as np

import posenc
from posenc._ext import ext

CASES = {"decode": (4, 1), "prefill": (1, 512)}
HQ, HKV, D = 32, 8, 128
BLOCK = 16
MLA_HEADS = 128


def _cpu_name():
    """The CPU's model name, with its family and model numbers on x86
    (a virtual machine may show only "AMD EPYC")."""
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                info.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = info.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in info and "model" in info:
        name += " (family %s model %s)" % (info["cpu family"], info["model"])
    return name


class Arrays:
    """One case's arrays, numpy or torch, float32 or bfloat16."""

    def __init__(self, kind, dtype, batch, tokens):
        rng = np.random.default_rng(7)
        w = (HQ + 2 * HKV) * D
        qkv = rng.standard_normal((batch, tokens, w), dtype=np.float32) * 0.5
        slots = (batch * tokens + BLOCK - 1) // BLOCK * BLOCK
        kc = np.zeros((slots // BLOCK, BLOCK, HKV, D), np.float32)
        pos = (np.arange(tokens) + 100 + np.arange(batch)[:, None]).astype(np.int64)
        slot_mapping = np.arange(batch * tokens, dtype=np.int64).reshape(batch, tokens)
        self.dtype = None
        if kind == "torch":
            import torch
            t = torch.bfloat16 if dtype == "bf16" else torch.float32
            qkv, kc = torch.from_numpy(qkv).to(t), torch.from_numpy(kc).to(t)
            vc = torch.zeros_like(kc)
            pos, slot_mapping = torch.from_numpy(pos), torch.from_numpy(slot_mapping)
            view = lambda x, h: x.view(batch, tokens, h, D)          # noqa: E731
        else:
            if dtype == "bf16":
                qkv = (qkv.view(np.uint32) >> 16).astype(np.uint16)   # bfloat16 bits
                kc = np.zeros(kc.shape, np.uint16)
                self.dtype = "bf16"
            vc = np.zeros_like(kc)
            view = lambda x, h: x.reshape(batch, tokens, h, D)       # noqa: E731
        self.qkv = qkv
        # [batch, tokens, heads, dim] views of the projection, and their
        # [batch, heads, tokens, dim] transposes (no copies)
        self.q_bthd = view(qkv[..., :HQ * D], HQ)
        self.k_bthd = view(qkv[..., HQ * D:(HQ + HKV) * D], HKV)
        self.v_bthd = view(qkv[..., (HQ + HKV) * D:], HKV)
        self.q, self.k, self.v = (self._swap(x) for x in (self.q_bthd, self.k_bthd, self.v_bthd))
        self.k_cache, self.v_cache = self._swap(kc), self._swap(vc)   # [blocks, heads, block, dim]
        self.positions, self.slot_mapping = pos, slot_mapping
        self.norm_w = np.ones(D, np.float32)
        self._mla(kind, dtype, batch, tokens, rng, pos, slot_mapping)

    def _mla(self, kind, dtype, batch, tokens, rng, pos, slot_mapping):
        """DeepSeek-V3's MLA arrays: q [B, T, 128, 192] (and its [B, H, T, D]
        transpose), kv [B, T, 576], a plain cache and an fp8_ds one."""
        qp = rng.standard_normal((batch, tokens, MLA_HEADS * 192), dtype=np.float32)
        kv = rng.standard_normal((batch, tokens, 576), dtype=np.float32)
        blocks = (batch * tokens + BLOCK - 1) // BLOCK
        mc = np.zeros((blocks, BLOCK, 576), np.float32)
        self.mla_bytes = np.zeros((blocks, BLOCK, 656), np.uint8)
        if kind == "torch":
            import torch
            t = torch.bfloat16 if dtype == "bf16" else torch.float32
            qp, kv, mc = (torch.from_numpy(x).to(t) for x in (qp, kv, mc))
            self.mla_bytes = torch.from_numpy(self.mla_bytes)
            self.mla_q_bthd = qp.view(batch, tokens, MLA_HEADS, 192)
        else:
            if dtype == "bf16":
                qp, kv, mc = ((x.view(np.uint32) >> 16).astype(np.uint16) for x in (qp, kv, mc))
            self.mla_q_bthd = qp.reshape(batch, tokens, MLA_HEADS, 192)
        self.mla_q, self.mla_kv, self.mla_cache = self._swap(self.mla_q_bthd), kv, mc

    @staticmethod
    def _swap(x):
        return x.transpose(1, 2) if hasattr(x, "detach") else x.transpose(0, 2, 1, 3)


def _ops(a, cache, kind, mla):
    """name -> (entry point, its arguments, the public call)."""
    rope, plain, ds = mla
    ops = {
        "rope": ("apply_rope_qk", (cache, a.q, a.k, a.positions, 0, None, a.dtype, 0),
                 lambda: cache.apply_(a.q, a.k, positions=a.positions, dtype=a.dtype)),
        "store": ("apply_rope_qk_store",
                  (cache, a.q, a.k, a.k_cache, a.slot_mapping, a.positions, 0, None, a.dtype,
                   a.dtype),
                  lambda: posenc.apply_rope_qk_store_(cache, a.k, a.k_cache, a.slot_mapping,
                                                      q=a.q, positions=a.positions,
                                                      dtype=a.dtype, cache_dtype=a.dtype)),
        "qk_norm_store": (
            "qk_norm_rope_store",
            (cache, a.q, a.k, a.v, a.k_cache, a.v_cache, a.slot_mapping, 1, 0, 1e-6, a.norm_w,
             a.norm_w, a.positions, 0, None, a.dtype, a.dtype, a.dtype),
            lambda: posenc.qk_norm_rope_store_(
                cache, a.k, a.k_cache, a.slot_mapping, q=a.q, v=a.v, v_cache=a.v_cache,
                kind="rms", q_weight=a.norm_w, k_weight=a.norm_w, positions=a.positions,
                dtype=a.dtype, cache_dtype=a.dtype, v_cache_dtype=a.dtype)),
        "mla": ("mla_rope_store",
                (rope, plain, a.mla_q, a.mla_kv, a.mla_cache, a.slot_mapping, a.positions, None,
                 a.dtype, a.dtype, None, 0, 0),
                lambda: posenc.mla_rope_store_(rope, plain, a.mla_q, a.mla_kv, a.mla_cache,
                                               a.slot_mapping, a.positions, dtype=a.dtype,
                                               cache_dtype=a.dtype)),
        "mla_fp8_ds": ("mla_rope_store",
                       (rope, ds, a.mla_q, a.mla_kv, a.mla_bytes, a.slot_mapping, a.positions,
                        None, a.dtype, None, None, 0, 0),
                       lambda: posenc.mla_rope_store_(rope, ds, a.mla_q, a.mla_kv, a.mla_bytes,
                                                      a.slot_mapping, a.positions,
                                                      dtype=a.dtype)),
    }
    if kind == "torch":
        from posenc.torch import apply_rotary_pos_emb
        # transformers' call on the projection's [B, T, H, D] views, as they come
        ops["torch.apply_rotary_pos_emb"] = (
            "apply_rope_qk", (cache, a.q_bthd, a.k_bthd, a.positions, 0, None, None, 1),
            lambda: apply_rotary_pos_emb(a.q_bthd, a.k_bthd, a.positions, cache,
                                         unsqueeze_dim=2))
        from posenc.torch import mla_rope_store_
        # q as the projection's [B, T, H, D] view, as it comes
        ops["torch.mla_rope_store_"] = (
            "mla_rope_store", (rope, plain, a.mla_q_bthd, a.mla_kv, a.mla_cache, a.slot_mapping,
                               a.positions, None, None, None, None, 1, 0),
            lambda: mla_rope_store_(rope, plain, a.mla_q_bthd, a.mla_kv, a.mla_cache,
                                    a.slot_mapping, a.positions, unsqueeze_dim=2))
    return ops


CLOCKS = {"cpu": time.thread_time_ns, "wall": time.perf_counter_ns}


def _python_loop(call, reps, clock):
    now = CLOCKS[clock]
    t0 = now()
    for _ in range(reps):
        call()
    return now() - t0


def measure(entry, args, call, reps, rounds, clock="cpu"):
    """(C ns, Python ns) per call: the fastest of `rounds` alternated rounds."""
    call()   # warm: first-use lookups, page faults
    c = p = float("inf")
    for _ in range(rounds):
        c = min(c, ext.timed(clock, entry, reps, *args) / reps)
        p = min(p, _python_loop(call, reps, clock) / reps)
    return c, p


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m posenc.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=0,
                    help="calls per round (default: 2000 for decode, 50 for prefill)")
    ap.add_argument("--rounds", type=int, default=15, help="alternated rounds (default 15)")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                    help="cpu: this thread's CPU time (default); wall: the wall clock")
    ap.add_argument("--case", default="decode,prefill")
    ap.add_argument("--dtype", default="f32,bf16")
    ap.add_argument("--arrays", default="numpy,torch")
    ap.add_argument("--op", default="rope,torch.apply_rotary_pos_emb,store,qk_norm_store,mla,"
                                    "mla_fp8_ds,torch.mla_rope_store_")
    args = ap.parse_args(argv)
    kinds = args.arrays.split(",")
    if "torch" in kinds:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("posenc.bench: torch is not installed: numpy arrays only")
            kinds = [k for k in kinds if k != "torch"]
    cache = posenc.RopeCache(head_dim=D, rope_theta=500000.0, max_positions=4096)
    # DeepSeek-V3's layer: YaRN x40 on 64 interleaved channels, the latent norm
    mla_rope = posenc.RopeCache(head_dim=64, style="gptj", rope_theta=10000.0, max_positions=4096,
                                rope_scaling={"rope_type": "yarn", "factor": 40.0, "mscale": 1.0,
                                              "mscale_all_dim": 1.0,
                                              "original_max_position_embeddings": 4096})
    mla_plain = posenc.MLA(64, 512, 512, 128, kv_weight=np.ones(512, np.float32))
    mla = (mla_rope, mla_plain, mla_plain.replace(format="fp8_ds"))
    print("posenc.bench: %s, libposenc %s (%s kernels), %s, Python %s, numpy %s%s"
          % (_cpu_name(), posenc.version(), posenc.isa_name(), os.path.basename(
              posenc.library_path()), platform.python_version(), np.__version__,
             "" if "torch" not in kinds else ", torch " + __import__("torch").__version__))
    print("Llama-3.1-8B heads (q 32, kv 8, head_dim 128; mla: DeepSeek-V3's, 128 q heads of 192, "
          "kv rows of 576), one thread; us per call (%s time), fastest of %d alternated rounds"
          % (args.clock, args.rounds))
    print("%-8s %-5s %-6s %-28s %9s %9s %8s %6s" % ("case", "dtype", "arrays", "call", "C",
                                                       "Python", "over", "%"))
    for case in args.case.split(","):
        batch, tokens = CASES[case]
        reps = args.reps or (2000 if tokens == 1 else 50)
        for dtype in args.dtype.split(","):
            for kind in kinds:
                a = Arrays(kind, dtype, batch, tokens)
                ops = _ops(a, cache, kind, mla)
                for name in args.op.split(","):
                    if name not in ops:
                        continue
                    entry, eargs, call = ops[name]
                    c, p = measure(entry, eargs, call, reps, args.rounds, args.clock)
                    print("%-8s %-5s %-6s %-28s %9.2f %9.2f %8.2f %6.1f"
                          % (case, dtype, kind, name, c / 1e3, p / 1e3, (p - c) / 1e3,
                             100.0 * (p - c) / c), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
