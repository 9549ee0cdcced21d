"""The embedding's weight gradient three ways on the GPU (ATen's
``embedding_dense_backward``, ``index_put_`` with accumulate, ``index_add_``) at BERT's
64 x 128 shapes: kernel time, whether the host synchronizes, and the difference from
ATen's result; then every synchronizing call of one pyfuser BERT step, with its
Python stack (``torch.cuda.set_sync_debug_mode``).

    PYTHONPATH=src python benchmarks/embedding_grad_probe.py
"""
import sys, time, traceback, warnings
import torch, triton

dev = "cuda"
torch.manual_seed(0)
cases = {"word": (30522, 0), "position": (512, -1), "token_type": (2, -1)}
grad = torch.randn(8192, 768, device=dev)
idx = {"word": torch.randint(0, 30522, (8192,), device=dev),
       "position": torch.arange(128, device=dev).repeat(64), "token_type": torch.zeros(8192, dtype=torch.long, device=dev)}

def ref(name):
    n, pad = cases[name]
    return torch.ops.aten.embedding_dense_backward(grad, idx[name], n, pad, False)

def index_put(name):
    n, pad = cases[name]
    g = grad if pad < 0 else torch.where((idx[name] == pad)[:, None], 0.0, grad)
    return torch.zeros(n, 768, device=dev).index_put_((idx[name],), g, accumulate=True)

def index_add(name):
    n, pad = cases[name]
    g = grad if pad < 0 else torch.where((idx[name] == pad)[:, None], 0.0, grad)
    return torch.zeros(n, 768, device=dev).index_add_(0, idx[name], g)

for name in cases:
    want = ref(name)
    for label, fn in (("embedding_dense_backward", ref), ("index_put_ accumulate", index_put), ("index_add_", index_add)):
        got = fn(name)
        torch.cuda.synchronize()
        err = (got - want).abs().max().item()
        torch.cuda.set_sync_debug_mode("error")
        try:
            fn(name)
            sync = "no sync"
        except RuntimeError as e:
            sync = "SYNC: " + str(e).splitlines()[0][:60]
        finally:
            torch.cuda.set_sync_debug_mode(0)
        ms = triton.testing.do_bench(lambda: fn(name), return_mode="median")
        print(f"| {name} | {label} | {ms * 1e3:.1f} us | {sync} | max err {err:.1e} |", flush=True)

# the pyfuser BERT step's synchronizing calls, with their Python stacks
from pyfuser.dynamo import bert_bench as bb
config = bb._bert_config(True, None)
model = bb._new_model(config).cuda().train()
batches = bb._batches(config, 64, 128, 3, "cuda", 1)
model = torch.compile(model, backend="pyfuser", dynamic=False)
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
step = bb.training_step(model, opt, "cuda", torch.float16)
for ids, labels in batches[:2]:
    step(ids, labels)
torch.cuda.synchronize()
stacks = []
orig = warnings.showwarning
def show(message, category, filename, lineno, file=None, line=None):
    stacks.append((str(message)[:100], "".join(traceback.format_stack(limit=14)[:-1])))
warnings.showwarning = show
with warnings.catch_warnings():
    warnings.simplefilter("always")
    warnings.showwarning = show
    torch.cuda.set_sync_debug_mode(1)
    try:
        step(*batches[2])
    finally:
        torch.cuda.set_sync_debug_mode(0)
print("synchronizing calls:", len(stacks))
for msg, st in stacks:
    print("----", msg)
    print(st)
