"""Host time of the pyfuser tree on PYTHONPATH: cached executes and a tiny model's step.

    PYTHONPATH=src python scripts/host_overhead.py [cuda|cpu] [calls]
    PYTHONPATH=old/src python scripts/host_overhead.py    # the same for another checkout

Prints one JSON line: microseconds per cached ``fd.execute`` (best and median of 7
rounds) of three small fusions (a 1024-element pointwise, a 32x128 softmax, a
row-then-column reduction), each's plan steps; on the GPU the same pointwise written
by hand in Triton and launched by Triton (``kernel[grid](...)`` with a fresh output:
the floor a cached execute is measured against); and milliseconds per training step
of a tiny GPT-2 through ``backend="pyfuser"`` (SGD).  Run it for two trees in one device
call to compare host overhead before and after a change on the same GPU.
"""
import json, sys, time, statistics
import torch
import pyfuser
import pyfuser.dynamo  # registers backend="pyfuser" (an installed package does so through its entry point)
from pyfuser import FusionDefinition, DataType

dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
N = int(sys.argv[2]) if len(sys.argv) > 2 else 3000


def per_call(fn, n, rounds=7):
    for _ in range(min(200, n)):
        fn()
    if dev == "cuda":
        torch.cuda.synchronize()
    best = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if dev == "cuda":
            torch.cuda.synchronize()
        best.append((time.perf_counter() - t0) / n * 1e6)
    return min(best), statistics.median(best)


def pointwise():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        y = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Float)
        fd.add_output(fd.ops.add(fd.ops.mul(x, y), x))
    ins = [torch.randn(1024, device=dev), torch.randn(1024, device=dev)]
    return fd, ins


def softmax():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Half)
        xf = fd.ops.cast(x, DataType.Float)
        e = fd.ops.exp(fd.ops.sub(xf, fd.ops.max(xf, dims=[1], keepdim=True)))
        fd.add_output(fd.ops.cast(fd.ops.div(e, fd.ops.sum(e, dims=[1], keepdim=True)), DataType.Half))
    return fd, [torch.randn(32, 128, device=dev, dtype=torch.half)]


def two_kernels():
    # layer-norm backward style: row stats then column sums (two steps, one reading the other's stores)
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        r = fd.ops.sum(x, dims=[1], keepdim=True)
        y = fd.ops.mul(x, r)
        fd.add_output(fd.ops.sum(y, dims=[0]))
        fd.add_output(fd.ops.sum(fd.ops.mul(y, y), dims=[1]))
    return fd, [torch.randn(64, 96, device=dev)]


out = {}
for name, make in (("pointwise_1024", pointwise), ("softmax_32x128", softmax), ("two_step", two_kernels)):
    fd, ins = make()
    fd.execute(ins)
    plan = list(fd._runtime.plans.values())[-1]
    out[name + "_us"] = per_call(lambda: fd.execute(ins), N)
    out[name + "_steps"] = len(plan.steps)

if dev == "cuda":  # the floor: the same one-kernel pointwise written in Triton, launched by Triton itself
    import triton
    import triton.language as tl

    @triton.jit
    def _mul_add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + i, mask=i < n)
        tl.store(o_ptr + i, x * tl.load(y_ptr + i, mask=i < n) + x, mask=i < n)

    x, y = torch.randn(1024, device=dev), torch.randn(1024, device=dev)

    def triton_launch():
        o = torch.empty_like(x)
        _mul_add[(1,)](x, y, o, x.numel(), BLOCK=1024)
        return o

    triton_launch()
    out["triton_launch_1024_us"] = per_call(triton_launch, N)

from pyfuser.bench import zoo
torch.manual_seed(0)
built = zoo.build("gpt2", hidden=64, layers=2, heads=2, vocab=500, seq=64)
model = built.model.to(dev)
compiled = torch.compile(model, backend="pyfuser")
batch = {k: v.to(dev) for k, v in built.batch(4, torch.Generator().manual_seed(1)).items()}
opt = torch.optim.SGD(model.parameters(), lr=1e-3)


def step():
    zoo.loss(compiled(**batch)).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


for _ in range(5):
    step()
best, med = per_call(step, max(1, N // 100), rounds=5)
out["gpt2_tiny_step_ms"] = (best / 1000, med / 1000)
out["tree"] = pyfuser.__file__
out["device"] = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
print(json.dumps(out))
