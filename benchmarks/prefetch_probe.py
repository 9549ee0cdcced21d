"""Wide-row log-softmax with the next row's loads in flight: a hand-written probe.

    PYTHONPATH=src python benchmarks/prefetch_probe.py

The persistent wide-row kernel (one [30522] fp16 row per program, 32 warps, one
program per SM) loads, reduces, then stores: while its stores drain, the SM has no
loads in flight.  Here each program walks rows ``pid, pid + G, ...`` and issues the
loads of its next row before it reduces and stores the current one (the loaded
values are loop-carried registers; a warp waits for them only at their first use in
the next iteration).  Row starts are peeled to 16 bytes as the code generator does.

Measured against pyfuser's own kernels for the two seed fusions (``fd.execute``, and
its launches again under a register cap, ``maxnreg``), the same kernel without the
prefetch, the next row requested into L2 instead (``prefetch.global.L2``: no
registers held), an online form of the persistent row (a (max, sum) pair per thread
group, one block reduction), and pointwise kernels that move the same bytes (the byte
mix's ceiling), and (``RECONVERT``) the row held as fp16 only, each pass
converting it for itself, so the prefetching kernel fits its registers (offline sm_90:
no spills for log_softmax_sub at 16 warps, 2 left for log_softmax_full).  Outputs
are checked against torch before timing; a wrong one is
marked in its row.  Results and what they mean: docs/BENCHMARKS.md, "The wide-row
log-softmax seeds" (H200, 2026-11-30: the register prefetch on 16 warps 85.4% of copy
for log_softmax_full against pyfuser's 83.6%, with 2 registers spilled; RECONVERT
log_softmax_sub 87.4%, no spills, the form the code generator took up as
``ReductionParams.prefetch``).
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from pyfuser import FusionDefinition
from pyfuser.bench import cases
from pyfuser.bench.harness import Options, copy_bandwidth


@triton.jit
def _row_geometry(r, J, BLOCK_J: tl.constexpr, ALIGN: tl.constexpr):
    """Row ``r``'s peeled edges (head and tail lanes, ``le``/``me``) and aligned body
    (``lb``/``mb``), as the code generator lays out a misaligned row."""
    row0 = r * J
    bstart = tl.multiple_of((row0 + ALIGN - 1) // ALIGN * ALIGN, ALIGN)
    bend = tl.multiple_of((row0 + J) // ALIGN * ALIGN, ALIGN)
    edge = tl.arange(0, 2 * ALIGN)
    le = tl.where(edge < ALIGN, row0 + edge, bend + edge - ALIGN)
    me = tl.where(edge < ALIGN, le < tl.minimum(bstart, row0 + J), (le >= bstart) & (le < row0 + J))
    lb = bstart + tl.arange(0, BLOCK_J)
    return le, me, lb, lb < bend


@triton.jit
def _row_loads(X, r, R, J, BLOCK_J: tl.constexpr, ALIGN: tl.constexpr):
    le, me, lb, mb = _row_geometry(r, J, BLOCK_J, ALIGN)
    live = r < R
    return tl.load(X + le, mask=live & me), tl.load(X + lb, mask=live & mb)


@triton.jit
def _widen(x):
    """fp16 -> fp32 through inline PTX: the compiler cannot merge it with another
    conversion of the same values, so the row need not stay live as fp32."""
    return tl.inline_asm_elementwise("cvt.f32.f16 $0, $1;", "=r,h", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def _row_store(xe, xb, X, r, J, Y16, Y32, BLOCK_J: tl.constexpr, ALIGN: tl.constexpr, TWO: tl.constexpr,
               RELOAD: tl.constexpr = False, RECONVERT: tl.constexpr = False):
    le, me, lb, mb = _row_geometry(r, J, BLOCK_J, ALIGN)
    if RECONVERT:  # the max in fp16 (exact), each pass converting for itself: the row held as fp16 only
        m = tl.maximum(tl.max(tl.where(me, xe, float("-inf"))), tl.max(tl.where(mb, xb, float("-inf"))))
        m = m.to(tl.float32)
        s = (tl.sum(tl.where(me, tl.exp(xe.to(tl.float32) - m), 0.0))
             + tl.sum(tl.where(mb, tl.exp(xb.to(tl.float32) - m), 0.0)))
        fe, fb = _widen(xe), _widen(xb)
    else:
        fe, fb = xe.to(tl.float32), xb.to(tl.float32)
        m = tl.maximum(tl.max(tl.where(me, fe, float("-inf"))), tl.max(tl.where(mb, fb, float("-inf"))))
        s = tl.sum(tl.where(me, tl.exp(fe - m), 0.0)) + tl.sum(tl.where(mb, tl.exp(fb - m), 0.0))
    lse = m + tl.log(s)
    if RELOAD:  # read the row again (L1 or L2) rather than hold it in fp32 through the reductions
        fe = tl.load(X + le, mask=me, cache_modifier=".ca").to(tl.float32)
        fb = tl.load(X + lb, mask=mb, cache_modifier=".ca").to(tl.float32)
    if TWO:  # log_softmax_full: an fp16 result and its fp32 copy
        he, hb = (fe - lse).to(tl.float16), (fb - lse).to(tl.float16)
        tl.store(Y16 + le, he, mask=me)
        tl.store(Y32 + le, he.to(tl.float32), mask=me)
        tl.store(Y16 + lb, hb, mask=mb)
        tl.store(Y32 + lb, hb.to(tl.float32), mask=mb)
    else:  # log_softmax_sub: fp32
        tl.store(Y32 + le, fe - lse, mask=me)
        tl.store(Y32 + lb, fb - lse, mask=mb)


@triton.jit
def _lse_combine(m1, s1, m2, s2):
    """(max, sum of exp(x - max)) of two parts; a part that holds the max keeps its sum."""
    m = tl.maximum(m1, m2)
    return m, tl.where(m1 == m, s1, s1 * tl.exp(m1 - m)) + tl.where(m2 == m, s2, s2 * tl.exp(m2 - m))


@triton.jit
def _row_store_online(xe, xb, r, J, Y16, Y32, BLOCK_J: tl.constexpr, ALIGN: tl.constexpr, TWO: tl.constexpr,
                      GROUP: tl.constexpr):
    """``_row_store`` with the row's statistics in one sweep: each group of GROUP
    contiguous elements (one thread's) takes its own max and sum of exponentials as its
    loads arrive, and one block reduction combines the (max, sum) pairs, so no warp
    waits for the row's max before its exponentials."""
    le, me, lb, mb = _row_geometry(r, J, BLOCK_J, ALIGN)
    fe, fb = xe.to(tl.float32), xb.to(tl.float32)
    ve = tl.where(me, fe, float("-inf"))
    em = tl.max(ve)
    es = tl.sum(tl.where(ve == float("-inf"), 0.0, tl.exp(ve - em)))
    vb = tl.reshape(tl.where(mb, fb, float("-inf")), [BLOCK_J // GROUP, GROUP])
    gm = tl.max(vb, 1)
    gs = tl.sum(tl.where(vb == float("-inf"), 0.0, tl.exp(vb - gm[:, None])), 1)
    bm, bs = tl.reduce((gm, gs), 0, _lse_combine)
    m, s = _lse_combine(em, es, bm, bs)
    lse = m + tl.log(s)
    if TWO:
        he, hb = (fe - lse).to(tl.float16), (fb - lse).to(tl.float16)
        tl.store(Y16 + le, he, mask=me)
        tl.store(Y32 + le, he.to(tl.float32), mask=me)
        tl.store(Y16 + lb, hb, mask=mb)
        tl.store(Y32 + lb, hb.to(tl.float32), mask=mb)
    else:
        tl.store(Y32 + le, fe - lse, mask=me)
        tl.store(Y32 + lb, fb - lse, mask=mb)


@triton.jit
def log_softmax_online_rows(X, Y16, Y32, R, J, BLOCK_J: tl.constexpr, ALIGN: tl.constexpr, TWO: tl.constexpr,
                            GROUP: tl.constexpr):
    r = tl.program_id(0)
    xe, xb = _row_loads(X, r, R, J, BLOCK_J, ALIGN)
    _row_store_online(xe, xb, r, J, Y16, Y32, BLOCK_J, ALIGN, TWO, GROUP)


@triton.jit
def _prefetch_l2(X, r, R, J, LINES: tl.constexpr):
    """Ask L2 for row ``r``'s 128-byte lines (64 fp16 elements each); no registers held."""
    at = tl.minimum(tl.arange(0, LINES) * 64, J - 1)
    live = ((tl.arange(0, LINES) * 64 < J + 63) & (r < R)).to(tl.int32)
    addr = (X + r * J + at).to(tl.int64, bitcast=True)
    tl.inline_asm_elementwise("{ .reg .pred p; setp.ne.b32 p, $2, 0; @p prefetch.global.L2 [$1]; mov.u32 $0, 0; }",
                              "=r,l,r", [addr, live], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def log_softmax_rows(X, Y16, Y32, R, J, BLOCK_J: tl.constexpr, ALIGN: tl.constexpr, TWO: tl.constexpr,
                     PREFETCH: tl.constexpr, L2_AHEAD: tl.constexpr = 0, LINES: tl.constexpr = 512,
                     RELOAD: tl.constexpr = False, RECONVERT: tl.constexpr = False):
    pid = tl.program_id(0)
    G = tl.num_programs(0)
    if L2_AHEAD > 0:  # the next rows' lines requested into L2, the row loaded when its turn comes
        for a in tl.static_range(1, L2_AHEAD + 1):
            if a > 1:
                _prefetch_l2(X, pid + (a - 1) * G, R, J, LINES)
        for r in range(pid, R, G):
            _prefetch_l2(X, r + L2_AHEAD * G, R, J, LINES)
            xe, xb = _row_loads(X, r, R, J, BLOCK_J, ALIGN)
            _row_store(xe, xb, X, r, J, Y16, Y32, BLOCK_J, ALIGN, TWO, RELOAD, RECONVERT)
    elif PREFETCH:
        xe, xb = _row_loads(X, pid, R, J, BLOCK_J, ALIGN)
        for r in range(pid, R, G):
            ne, nb = _row_loads(X, r + G, R, J, BLOCK_J, ALIGN)
            _row_store(xe, xb, X, r, J, Y16, Y32, BLOCK_J, ALIGN, TWO, RELOAD, RECONVERT)
            xe, xb = ne, nb
    else:
        for r in range(pid, R, G):
            xe, xb = _row_loads(X, r, R, J, BLOCK_J, ALIGN)
            _row_store(xe, xb, X, r, J, Y16, Y32, BLOCK_J, ALIGN, TWO, RELOAD, RECONVERT)


@triton.jit
def cast_copy(X, Y16, Y32, N, BLOCK: tl.constexpr, TWO: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(X + offs, mask=m)
    if TWO:
        tl.store(Y16 + offs, x, mask=m)
    tl.store(Y32 + offs, x.to(tl.float32), mask=m)


def main():
    torch.manual_seed(0)
    opts = Options()
    copy = copy_bandwidth(opts)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    R, J = 8192, 30522
    x = torch.randn(R, J, device="cuda", dtype=torch.float16) * 4
    ref = torch.log_softmax(x.float(), -1)
    y16 = torch.empty(R, J, device="cuda", dtype=torch.float16)
    y32 = torch.empty(R, J, device="cuda", dtype=torch.float32)
    rows = []

    def record(case, variant, fn, nbytes, kernel=None):
        ms = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
        gbps = nbytes / ms / 1e6
        regs = f"{kernel.n_regs}/{kernel.n_spills}" if kernel is not None else "-"
        rows.append((case, variant, ms * 1e3, gbps, 100 * gbps / copy, regs))
        print(rows[-1], flush=True)

    for two, case in ((True, "log_softmax_full"), (False, "log_softmax_sub")):
        nbytes = x.numel() * (2 + 4 + (2 if two else 0))
        c = cases.BY_NAME[case]
        sizes = c.sizes(1.0)
        with FusionDefinition() as fd:
            c.build(fd, sizes)
        inputs = list(c.make_inputs(sizes, "cuda", None))
        fd.execute(inputs)
        record(case, "pyfuser", lambda: fd.execute(inputs), nbytes)
        # pyfuser's own kernels with a register cap (more programs per SM, if nothing spills)
        from pyfuser.runtime import executor
        executor.RECORD_LAUNCHES = []
        fd.execute(inputs)
        rec, executor.RECORD_LAUNCHES = executor.RECORD_LAUNCHES, None
        for cap in (32, 40, 48):
            try:
                ks = [fn[grid](*args, **kw, maxnreg=cap) for fn, grid, args, kw in rec]
            except Exception as err:
                print(case, "maxnreg", cap, type(err).__name__, str(err)[:120])
                continue
            record(case, f"pyfuser, maxnreg {cap}", lambda: [fn[grid](*args, **kw, maxnreg=cap)
                                                          for fn, grid, args, kw in rec], nbytes, ks[0])
        for prefetch, warps, per_sm, ahead, reload, reconvert in (
                (False, 32, 1, 0, False, False), (True, 32, 1, 0, False, False), (True, 16, 1, 0, False, False),
                (False, 32, 1, 1, False, False), (False, 16, 1, 1, False, False), (False, 32, 1, 2, False, False),
                (True, 16, 1, 0, True, False), (False, 32, 1, 0, True, False), (False, 16, 1, 0, True, False),
                (True, 32, 1, 0, True, False), (True, 16, 1, 0, False, True), (False, 32, 1, 0, False, True)):
            grid = (sms * per_sm,)
            y16.fill_(float("nan"))
            y32.fill_(float("nan"))
            try:
                k = log_softmax_rows[grid](x, y16, y32, R, J, BLOCK_J=32768, ALIGN=8, TWO=two, PREFETCH=prefetch,
                                           L2_AHEAD=ahead, RELOAD=reload, RECONVERT=reconvert, num_warps=warps)
            except Exception as err:  # out of resources: this configuration cannot run
                print(case, prefetch, warps, per_sm, type(err).__name__, str(err)[:120])
                continue
            err = (y32 - ref).abs().max().item()
            ok = err < (2e-2 if two else 1e-4) and (not two or (y16.float() - ref).abs().max().item() < 2e-2)
            name = (f"{'prefetch' if prefetch else 'rows'} {warps}w x{per_sm}/SM" + (f" L2 {ahead} ahead" if ahead else "")
                    + (", output pass reloads" if reload else "") + (", each pass converts" if reconvert else "")
                    + ("" if ok else f" WRONG {err:.3g}"))
            record(case, name, lambda: log_softmax_rows[grid](x, y16, y32, R, J, BLOCK_J=32768, ALIGN=8, TWO=two,
                                                              PREFETCH=prefetch, L2_AHEAD=ahead, RELOAD=reload,
                                                              RECONVERT=reconvert, num_warps=warps), nbytes, k)
        for warps, group in ((32, 8), (32, 16), (32, 32), (16, 16)):
            y16.fill_(float("nan"))
            y32.fill_(float("nan"))
            try:
                k = log_softmax_online_rows[(R,)](x, y16, y32, R, J, BLOCK_J=32768, ALIGN=8, TWO=two, GROUP=group,
                                                  num_warps=warps)
            except Exception as err:
                print(case, "online", warps, group, type(err).__name__, str(err)[:120])
                continue
            err = (y32 - ref).abs().max().item()
            ok = err < (2e-2 if two else 1e-4) and (not two or (y16.float() - ref).abs().max().item() < 2e-2)
            record(case, f"online rows {warps}w groups of {group}" + ("" if ok else f" WRONG {err:.3g}"),
                   lambda: log_softmax_online_rows[(R,)](x, y16, y32, R, J, BLOCK_J=32768, ALIGN=8, TWO=two,
                                                         GROUP=group, num_warps=warps), nbytes, k)
        n = x.numel()
        grid = (triton.cdiv(n, 2048),)
        k = cast_copy[grid](x, y16, y32, n, BLOCK=2048, TWO=two, num_warps=8)
        record(case, "same bytes, pointwise", lambda: cast_copy[grid](x, y16, y32, n, BLOCK=2048, TWO=two,
                                                                      num_warps=8), nbytes, k)
    print(f"\ncopy {copy:.0f} GB/s, {sms} SMs\n")
    print("| case | variant | us | GB/s | % of copy | regs/spills |\n|---|---|---|---|---|---|")
    for case, v, us, gbps, pct, regs in rows:
        print(f"| {case} | {v} | {us:.1f} | {gbps:.0f} | {pct:.1f}% | {regs} |")


if __name__ == "__main__":
    main()
