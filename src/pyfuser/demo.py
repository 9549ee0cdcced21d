"""Run the report's four seed fusions and check them against PyTorch eager.

    python -m pyfuser.demo                 # CUDA: the report's sizes; CPU: small sizes
    python -m pyfuser.demo --show-kernels  # also dump the generated kernels

For each fusion this prints its python definition (``repr(fd)``), runs it with
``execute`` and compares every output with the same computation written by hand in
PyTorch eager.  Dropout outputs cannot equal eager's (the random draws differ), so
they are checked for consistency instead: the keep mask holds only 0 and 1, and the
dropped-out output equals mask * softmax * 1.11111 at fp16 precision.
"""
from __future__ import annotations

import argparse
import os
import sys


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m pyfuser.demo", description=__doc__.splitlines()[0])
    p.add_argument("--show-kernels", action="store_true", help="dump generated kernel code (PYFUSER_DUMP=kernel_code)")
    p.add_argument("--small", action="store_true", help="use the small CPU sizes even when CUDA is available")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    return p.parse_args(argv)


def _max_err(got, want) -> float:
    import torch

    if got.dtype == torch.bool or want.dtype == torch.bool:
        return float((got != want).sum().item())
    return float((got.double() - want.double()).abs().nan_to_num(float("inf")).max().item()) if got.numel() else 0.0


def _tolerance(dtype):
    import torch

    return {torch.float16: (1e-3, 1e-3), torch.bfloat16: (8e-3, 8e-3)}.get(dtype, (1e-5, 1e-5))


def _check(name, got, want, precision=None) -> bool:
    """``precision``: the dtype whose tolerance applies, when an output carries less
    precision than its dtype (the fp32 copy of an fp16 result)."""
    import torch

    if got.shape != want.shape or got.dtype != want.dtype:
        print(f"  {name}: FAIL: got {tuple(got.shape)} {got.dtype}, expected {tuple(want.shape)} {want.dtype}")
        return False
    rtol, atol = _tolerance(precision or got.dtype)
    ok = torch.allclose(got.double(), want.double(), rtol=rtol, atol=atol, equal_nan=True) \
        if got.dtype != torch.bool else torch.equal(got, want)
    print(f"  {name}: {tuple(got.shape)} {str(got.dtype).replace('torch.', '')}  "
          f"max error {_max_err(got, want):.3g}  {'PASS' if ok else 'FAIL'}")
    return bool(ok)


def _check_dropout(keep, dropped, probs) -> bool:
    import torch

    from .bench.seeds import DROPOUT_KEEP_SCALE

    values = sorted(torch.unique(keep.to(torch.int8)).tolist())
    kept = keep.float().mean().item()
    ok = keep.dtype == torch.bool and set(values) <= {0, 1} and 0.8 < kept < 1.0
    print(f"  T27: {tuple(keep.shape)} {str(keep.dtype).replace('torch.', '')}  values {values}  "
          f"kept {kept:.3f} (expected about 0.9)  {'PASS' if ok else 'FAIL'}")
    want = (keep.float() * probs * DROPOUT_KEEP_SCALE).half()
    return _check("T33 (vs mask * T24 * 1.11111)", dropped, want) and ok


def _run_case(case, sizes, device, gen) -> bool:
    import torch

    from .frontend import Fusion, FusionDefinition

    print(f"== {case.name}  sizes {sizes}  device {device}")
    fs = Fusion()
    with FusionDefinition(fs) as fd:
        case.build(fd, *sizes)
    print(repr(fd))
    inputs = case.make_inputs(sizes, device, gen)
    outs = fs.execute(inputs)
    want = case.eager(*inputs, *sizes)
    if case.name == "bert_softmax_dropout":
        ok = _check("T11", outs[0], want[0]) & _check("T24", outs[1], want[1])
        return ok & _check_dropout(outs[2], outs[3], outs[1])
    names = {"log_softmax_full": ["T1", "T14", "T15"]}.get(case.name, ["out"])
    ok = True
    for name, got, ref in zip(names, outs, want):
        # T15 = float(T14): fp16 precision in an fp32 tensor
        ok &= _check(name, got, ref, precision=torch.float16 if name == "T15" else None)
    if case.name == "log_softmax_full":
        ok &= _check("T15 (vs float(T14))", outs[2], outs[1].float())
        shares = outs[0].untyped_storage().data_ptr() == inputs[0].untyped_storage().data_ptr()
        print(f"  T1 is a view of the input (moves no bytes): {shares}")
    return ok


def main(argv=None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if args.show_kernels:
        dump = [d for d in os.environ.get("PYFUSER_DUMP", "").split(",") if d]
        os.environ["PYFUSER_DUMP"] = ",".join(dump + ["kernel_code"])
    import warnings

    import torch

    from .bench.seeds import SEEDS

    # Masked-off lanes under Triton's interpreter compute on padding (inf * 0, ...); numpy warns.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton.runtime.interpreter")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    full = device.startswith("cuda") and not args.small
    gen = torch.Generator().manual_seed(0)
    results = {}
    for case in SEEDS.values():
        results[case.name] = _run_case(case, case.full_sizes if full else case.small_sizes, device, gen)
        print()
    failed = [n for n, ok in results.items() if not ok]
    print(f"{len(results) - len(failed)} of {len(results)} fusions PASS" + (f"; FAIL: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
