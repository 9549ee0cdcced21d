"""The fusion IR: dtypes, values and exprs, the op table, shape rules."""
