"""Tests known to fail because of a gap in the code generator, marked xfail
(non-strict) by conftest.py so the rest of the suite stays a useful signal.

Each entry is (regex on the test's node id, reason).  A fixed gap shows up as
XPASS in the summary: delete its entry then.  Only code-generator gaps belong here;
a frontend or reference bug is fixed, not listed.
"""
KNOWN_CODEGEN_GAPS = [
    (r"test_op_sweep\.py::test_binary_python_scalar\[pow-bool-bool-tensor-scalar\]",
     "codegen: pow of a bool tensor by True: the interpreter's pow is not implemented for Bool"),
    (r"test_own_rows_division\.py::test_broadcast_mask_beside_a_softmax_tile",
     "codegen: a smaller output's own-row loop counter is a Python int under the interpreter, and the "
     "magic-number division of its row index calls .to on it"),
]
