"""CI slice of the eager-oracle fuzzer (eager_fuzz.py): a fixed seed, every fusion's
difference classified; a new one fails the test.  The long run is in docs/DEBUGGING.md."""
import math
import warnings

import numpy as np
import pytest
import torch

from pyfuser import DataType, FusionDefinition

from .eager_fuzz import KNOWN, classify, run_one

SEED, COUNT, CHUNKS = "ci", 480, 8


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_fusions_match_eager(chunk):
    warnings.filterwarnings("ignore")  # NaN and overflow in the interpreter's numpy are the point
    per = COUNT // CHUNKS
    new = []
    for i in range(chunk * per, (chunk + 1) * per):
        rec, diffs, _ = run_one(SEED, i)
        if classify(rec, diffs) == "new":
            new.append(f"[{i}] " + "; ".join(f"{k}: {t}" for k, t in diffs))
    assert not new, ("differences from eager that no known bug explains (reproduce with "
                     f"`python -m tests.segment.eager_fuzz --seed {SEED} --only I --show`):\n" + "\n".join(new))


def test_a_product_of_an_infinity_and_underflowing_values_is_order_dependent():
    # seed s6cpu, fusion 3107: prod over -inf, inf and two -4.2e-45; the subnormals' product
    # is 0 in eager's order (0 * inf: NaN) and never formed in the kernel's (-inf)
    rec, diffs, _ = run_one("s6cpu", 3107)
    assert diffs and classify(rec, diffs) == "numerical", diffs


def test_known_bugs_name_a_reason():
    for feat, (kinds, reason) in KNOWN.items():
        assert kinds and reason, feat


# Found by the eager fuzzer, minimized.

@pytest.mark.parametrize("idt", [DataType.Int32, DataType.Int])
@pytest.mark.parametrize("fdt", [DataType.Half, DataType.BFloat16])
def test_an_integer_operand_of_a_16_bit_op_is_rounded_to_it(idt, fdt):
    """An integer tensor, runtime scalar or constant meeting a 16-bit float is cast to
    that dtype first (nvFuser's promoteValues, torch's common dtype), then computed in
    fp32: 70000 + -10000 in fp16 is inf + -10000 = inf, not 60000."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], dtype=idt)
        b = fd.define_tensor(shape=[-1], dtype=fdt)
        s = fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.add(a, b))
        fd.add_output(fd.ops.mul(b, a))
        fd.add_output(fd.ops.add(b, s))
        fd.add_output(fd.ops.sub(b, fd.define_scalar(70001)))
        fd.add_output(fd.ops.lt(a, b))
    a = torch.tensor([70000, 2049, 16777217, -70001], dtype=idt.torch)
    b = torch.tensor([-10000.0, 0.0, 0.0, -1.0], dtype=fdt.torch)
    got = fd.execute([a, b, 70001])
    af = a.to(fdt.torch)
    want = [af + b, b * af, b + torch.tensor(70001).to(fdt.torch), b - torch.tensor(70001).to(fdt.torch), af < b]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("op", ["mul", "truediv", "div", "fmod", "pow"])
def test_an_integer_scalar_of_a_16_bit_op_is_rounded_to_it_in_every_op(op):
    """The reference executor rounded an integer scalar to fp16 only where torch does
    (add, sub), and multiplied and divided with the unrounded number where torch does;
    the kernels round it for every op, as nvFuser does: fp16 ``0.5 * 70000`` is inf and
    ``inf / -2**63`` is NaN (the scalar is -inf in fp16)."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.Half)
        fd.add_output(getattr(fd.ops, op)(t, fd.define_scalar(dtype=DataType.Int)))
    x = torch.tensor([0.5, -10000.0, float("inf"), 3.0], dtype=torch.float16)
    for s in (70000, -2**63, 3):
        wide = torch.tensor(s).float().to(torch.float16).float()
        want = getattr(torch, {"truediv": "true_divide", "div": "true_divide"}.get(op, op))(x.float(), wide).half()
        for got in (fd.execute([x, s])[0], fd.reference([x, s])[0]):
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("op", ["fmod", "remainder"])
@pytest.mark.parametrize("dt", [DataType.Float, DataType.BFloat16])
def test_fmod_of_a_huge_quotient_is_exact_on_cpu(op, dt):
    """fmod is exact in IEEE arithmetic (C's fmod, libdevice's); the interpreter's
    stand-in was torch's CPU fmod, whose vectorized loop computes a - trunc(a / b) * b
    and gives NaN once a / b overflows (fmod(3.39e38, 1e-3) in a row of 16 or more);
    the reference executor called it too."""
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], dtype=dt)
        b = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        fd.add_output(getattr(fd.ops, op)(a, b))
    a = torch.tensor([3.3895e38, -3.3895e38, 1e30, 2.5] * 8).to(dt.torch)
    b = torch.tensor([9.9945e-4, 9.9945e-4, -7e-3, 0.75] * 8)
    r = np.fmod(a.float().numpy(), b.numpy())  # exact: the remainder is representable
    if op == "remainder":
        r = np.where((r != 0) & ((r < 0) != (b.numpy() < 0)), r + b.numpy(), r)
    want = torch.from_numpy(r)  # fp32: the promoted dtype of (dt, fp32)
    torch.testing.assert_close(fd.execute([a, b])[0], want, rtol=0, atol=0)
    torch.testing.assert_close(fd.reference([a, b])[0], want, rtol=0, atol=0)


def test_a_runtime_scalar_keeps_the_sign_of_zero_on_cpu():
    """A runtime float scalar of -0.0 reaches the kernel as -0.0: Triton's interpreter
    turned a Python float argument into a constant, and its constants of value 0 are
    +0.0 (a compiled kernel takes the fp32 argument as it is)."""
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.Float)
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.mul(t, s))
        fd.add_output(fd.ops.truediv(t, s))
    t = torch.tensor([1.0, -2.0])
    got = fd.execute([t, -0.0])
    assert torch.signbit(got[0]).tolist() == [True, False]
    assert got[1].tolist() == [-math.inf, math.inf]
