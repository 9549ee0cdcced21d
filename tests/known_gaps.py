"""Tests known to fail because of a gap in the code generator, marked xfail
(non-strict) by conftest.py so the rest of the suite stays a useful signal.

Each entry is (regex on the test's node id, reason).  A fixed gap shows up as
XPASS in the summary: delete its entry then.  Only code-generator gaps belong here;
a frontend or reference bug is fixed, not listed.
"""
KNOWN_CODEGEN_GAPS = [
    (r"test_op_sweep\.py::test_binary_python_scalar\[pow-bool-bool-tensor-scalar\]",
     "codegen: pow of a bool tensor by True: the interpreter's pow is not implemented for Bool"),
    (r"test_op_sweep\.py::test_cast\[(int64|int32|bool|float64)-bfloat16\]",
     "codegen: casts from int64/int32/bool/float64 to bfloat16 give NaN (interpreter)"),
    (r"test_definition\.py::test_sum_over_empty_extent_is_zero",
     "codegen: a sum over an empty extent ([3, 0] -> [3]) leaves the output unwritten (garbage, not 0; "
     "passes when the memory happens to be zero)"),
    (r"test_op_sweep\.py::(test_binary_runtime_scalar_input|test_unary_of_constant_scalar)"
     r"|test_definition\.py::(test_runtime_scalar_inputs|test_scalar_arithmetic_feeds_tensor_ops)"
     r"|test_random\.py::(test_uniform_with_runtime_bounds|test_constant_seed_and_offset)"
     r"|test_printer\.py::test_round_trip_of_many_op_kinds",
     "codegen: runtime scalar inputs and scalar-only expressions reach the kernel as Python numbers "
     "('float' object has no attribute 'to')"),
]
