"""Errors that name what is wrong: bad definitions and inputs raise pyfuser's errors
at definition or input time (naming the argument, expected vs got), never a
CompileError, a bare IndexError or silence; a missing package is named with how to
install it."""
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from pyfuser import DataType, FusionDefinition
from pyfuser.errors import (CompileError, DefinitionError, DefinitionTypeError, DependencyError, InputError,
                            InputTypeError)


def neg_fusion():
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.neg(fd.define_tensor(shape=[-1])))
    return fd


def test_meta_tensor_input():
    fd = neg_fusion()
    with pytest.raises(InputError, match=r"device meta .*input 0 \(T0\)"):
        fd.execute([torch.empty(4, device="meta")])


@pytest.mark.parametrize("dtype, value", [(DataType.Int, 2**70), (DataType.Int, 2**63), (DataType.Int, -2**63 - 1),
                                          (DataType.Int32, 2**31)])
def test_runtime_int_out_of_range(dtype, value):
    with FusionDefinition() as fd:
        t, s = fd.define_tensor(shape=[-1], dtype=dtype), fd.define_scalar(dtype=dtype)
        fd.add_output(fd.ops.add(t, s))
    with pytest.raises(InputError, match=rf"input 1 \(S1\) of dtype {dtype} must be in .*got {value}"):
        fd.execute([torch.ones(3, dtype=dtype.torch), value])
    edge = 2**63 - 1 if dtype is DataType.Int else 2**31 - 1
    (out,) = fd.execute([torch.zeros(3, dtype=dtype.torch), edge])
    assert out.tolist() == [edge] * 3


@pytest.mark.parametrize("value", [2**64, 2**63, -2**63 - 1])
def test_int_constant_out_of_int64(value):
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], dtype=DataType.Int)
        with pytest.raises(DefinitionError, match=rf"add: .*constant {value} is outside int64"):
            fd.ops.add(t, value)
        with pytest.raises(DefinitionError, match=rf"define_scalar: .*constant {value} is outside int64"):
            fd.define_scalar(value)
        fd.add_output(fd.ops.add(t, 2**63 - 1))


def test_define_tensor_strides_of_the_wrong_length():
    with FusionDefinition() as fd:
        with pytest.raises(DefinitionError, match=r"strides has 1 entries, expected one per dim of sizes \[2, 3\]"):
            fd.define_tensor(sizes=[2, 3], strides=[1])
        with pytest.raises(DefinitionTypeError, match="strides entries must be ints"):  # a float: wrong kind
            fd.define_tensor(sizes=[2, 3], strides=[3, 1.0])
        fd.add_output(fd.ops.neg(fd.define_tensor(sizes=[2, 3], strides=[1, 2])))
    x = torch.randn(3, 2).t()
    torch.testing.assert_close(fd.execute([x])[0], -x)


def test_unknown_execute_keyword():
    fd = neg_fusion()
    x = torch.randn(3)
    with pytest.raises(InputTypeError, match="unexpected keyword argument 'devise'"):
        fd.execute([x], devise="cpu")
    (out,) = fd.execute([x], save_repro_inputs=False, _enable_options=[])  # nvFuser's keywords
    torch.testing.assert_close(out, -x)


BLOCKED_IMPORT = textwrap.dedent("""
    import sys
    import torch
    blocked = sys.argv[1]

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == blocked:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    sys.meta_path.insert(0, Block())
    for k in [k for k in sys.modules if k.split(".")[0] == blocked]:
        del sys.modules[k]
    from pyfuser import FusionDefinition
    with FusionDefinition() as fd:
        fd.add_output(fd.ops.neg(fd.define_tensor(shape=[-1])))
    try:
        fd.execute([torch.ones(3)])
    except Exception as err:
        print(type(err).__name__, err)
""")


@pytest.mark.parametrize("package", ["triton", "numpy"])
def test_missing_package_is_named(package):
    src = os.path.join(os.path.dirname(__file__), "..", "..", "src")
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    done = subprocess.run([sys.executable, "-c", BLOCKED_IMPORT, package], capture_output=True, text=True, env=env,
                          timeout=120)
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith(DependencyError.__name__), done.stdout + done.stderr
    assert f"'{package}' is not installed" in last and f"pip install {package}" in last
    assert CompileError.__name__ not in last
