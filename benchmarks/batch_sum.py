"""A softmax backward whose gradient is also summed over the batch (T5's position bias,
added to every batch's scores, takes that sum; docs/TUNING.md#batch-sums): the
inner-outer tile's groups' walk as planned and at other params, against the two
kernels without it (an inner normalization, then an outer reduction recomputing the
gradient), against the pre-walk regions (the normalization writing the fp32 gradient
for a later region's sum), and against the device-to-device copy of the walk's bytes.
Every variant is checked against torch's softmax backward.

    PYTHONPATH=src:benchmarks python benchmarks/batch_sum.py
"""
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.schedulers.base import Choices

from odd_rows import bench, report


def define(fd, t):
    return fd.define_tensor(shape=list(t.shape), contiguity=[True] * t.dim(), dtype=DataType.BFloat16
                            if t.dtype == torch.bfloat16 else DataType.Float)


def softmax_backward(fd, dy, p, shape):
    tdy, tp = fd.ops.cast(dy, DataType.Float), fd.ops.cast(p, DataType.Float)
    dp = fd.ops.mul(tdy, tp)
    r = fd.ops.sum(dp, dims=[3], keepdim=True)
    return fd.ops.sub(dp, fd.ops.mul(tp, fd.ops.broadcast_in_dim(r, shape=shape, broadcast_dims=[0, 1, 2, 3])))


def walk(dy, p, g):
    """Both outputs from one fusion: the groups' walk when the schedulers take it."""
    with FusionDefinition() as fd:
        tdy, tp, tg = define(fd, dy), define(fd, p), define(fd, g)
        dx = softmax_backward(fd, tdy, tp, list(dy.shape))
        fd.add_output(fd.ops.cast(dx, DataType.BFloat16))
        fd.add_output(fd.ops.add(tg, fd.ops.sum(dx, dims=[0], keepdim=True)))
    return fd


def regions(dy, p, g):
    """The regions before the walk: the normalization hands the fp32 gradient over."""
    with FusionDefinition() as first:
        dx = softmax_backward(first, define(first, dy), define(first, p), list(dy.shape))
        first.add_output(first.ops.cast(dx, DataType.BFloat16))
        first.add_output(dx)
    full = torch.empty(dy.shape, dtype=torch.float32, device=dy.device)
    with FusionDefinition() as second:
        tf, tg = define(second, full), define(second, g)
        second.add_output(second.ops.add(tg, second.ops.sum(tf, dims=[0], keepdim=True)))
    return first, second


def main():
    rows = []
    for B, H, S in ((16, 12, 512), (16, 12, 128)):
        g_ = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(B, H, S, S, device="cuda", generator=g_)
        p = torch.softmax(x, -1).bfloat16()
        dy = torch.randn(B, H, S, S, device="cuda", generator=g_).bfloat16()
        g = torch.randn(1, H, S, S, device="cuda", generator=g_)
        want_dx = torch._softmax_backward_data(dy.float(), p.float(), -1, torch.float32)
        want = (want_dx.bfloat16(), g + want_dx.sum(0, keepdim=True))
        mb = (2 * dy.numel() * 2 + dy.numel() * 2 + 2 * g.numel() * 4) / 1e6
        name = f"{B}x{H}x{S}x{S}"

        def run_check(label, run):
            outs = run()
            err = max((o.float() - w.float()).abs().max().item() for o, w in zip(outs, want))
            rows.append((name, label, bench(run), mb, err))

        fd = walk(dy, p, g)
        fd.validate([dy, p, g])
        print(name, fd.explain([dy, p, g]), flush=True)
        run_check("as planned", lambda: fd.execute([dy, p, g]))
        for label, ch in (("1 group a block", dict(block_k=1)), ("4 groups a block, 4 warps",
                                                                  dict(block_k=4, num_warps=4)),
                          ("not pipelined", dict(stages=1)), ("pipelined 3 deep", dict(stages=3)),
                          ("4 warps", dict(num_warps=4))):
            with Choices(**ch):
                f2 = walk(dy, p, g)
                run_check(label, lambda: f2.execute([dy, p, g]))
        with Choices(disable=("inner_outer",)):
            f3 = walk(dy, p, g)
            run_check("two kernels (no inner_outer)", lambda: f3.execute([dy, p, g]))
        first, second = regions(dy, p, g)

        def before():
            dxb, dxf = first.execute([dy, p])
            return dxb, second.execute([dxf, g])[0]
        rows.append((name, "regions before (fp32 dx handed over)", bench(before),
                     mb + dy.numel() * 8 / 1e6,
                     max((o.float() - w.float()).abs().max().item() for o, w in zip(before(), want))))
        src = torch.empty(int(mb * 1e6 / 2) // 4, dtype=torch.float32, device="cuda")
        dst = torch.empty_like(src)
        rows.append((name, "copy of the walk's bytes", bench(lambda: dst.copy_(src)), mb, 0.0))
    report(rows)


if __name__ == "__main__":
    main()
