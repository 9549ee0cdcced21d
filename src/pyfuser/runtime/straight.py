"""The straight-line rendering of a ``Program``: its steps as one generated function.

Not a second runner: the same steps as ``Program.run``'s loop, unrolled, with every
index, shape, stride and dtype a constant.  After the first run without hooks,
``Program.run`` calls this function instead of looping (see ``program``'s module
docstring, and docs/TUNING.md#host-time for what it saves).
"""
from __future__ import annotations

from ..compat import fast_empty_strided
from .args import rng_words
from .cache import count
from .launch import allocator, launch_error
from .rng_state import draw_seed_offset


def straight_line(prep):
    """``prep.run(inputs)`` without hooks as one generated function,
    the loop over the program unrolled: each output allocated with its shape, strides
    and dtype bound as constants, each launch called with its arguments picked from
    the pool by constant index (random words in place), through its direct launcher
    where it has one (the module docstring says what it saves).  None while a
    launch's way of launching is not settled yet (a direct launcher not tried: after
    the first run on the GPU); ``False`` for a program with host steps (it keeps the
    loop)."""
    direct_map = prep.direct
    steps = list(prep.program)
    if any(step.__class__ is not int for step in steps):
        return False
    if prep.device.type == "cuda" and any(prep.direct_ok[s] and s not in direct_map for s in steps):
        return None
    env = {"ALLOC": allocator, "DEV": prep.device, "COUNT": count, "launch_error": launch_error,
           "SR": prep._scalar_run, "CONSTS": tuple(prep._consts), "EMPTIES": prep._empties, "SELF": prep}
    lines = ["def straight(inputs):"]
    pool = f"[*inputs{', *SR(inputs)' if prep._scalar_run is not None else ''}{', *CONSTS' if prep._consts else ''}]"
    lines.append(f"    p = {pool}")
    if prep._empties:
        lines.append("    p += [SELF._empty(shape, dtype) for shape, dtype in EMPTIES]")
    if prep.n_random:
        env.update(DRAW=draw_seed_offset, WORDS=rng_words, NR=prep.n_random)
        lines.append("    seed, base = DRAW(DEV, NR)")
        lines.append("    w = [WORDS(seed, base + k) for k in range(NR)]")
    if prep.device.type == "cpu" and fast_empty_strided("cpu") is not None:
        env["EMPTY"] = fast_empty_strided("cpu")
        lines.append("    empty = EMPTY")
    else:
        lines.append("    empty = ALLOC(DEV)")
    if steps:
        lines.append("    s = None")
        lines.append("    try:")
    srcs = []
    for n, step in enumerate(steps):
        src, fn, grid, kw, alloc, idx, rng, _, _ = prep.launches[step]
        srcs.append(src)
        lines.append(f"        s = {n}")
        for a, (shape, strides, dtype) in enumerate(alloc):
            env[f"A{n}_{a}"] = (tuple(shape), tuple(strides), dtype)
            lines.append(f"        p.append(empty(*A{n}_{a}))")
        args = [f"p[{j}]" for j in idx]
        for j, r, w in rng:
            args[j] = f"w[{r}][{w}]"
        direct = direct_map.get(step)
        if direct:
            env[f"L{n}"], env[f"K{n}"] = direct[0], tuple(direct[1])
            lines.append(f"        L{n}({', '.join(args)}{', ' if args else ''}*K{n})")
        else:
            env[f"F{n}"], env[f"KW{n}"] = fn[grid], dict(kw)
            lines.append(f"        F{n}({', '.join(args)}{', ' if args else ''}**KW{n})")
    env["SRCS"] = tuple(srcs)
    if steps:
        lines.append("    except Exception as err:")
        lines.append("        raise launch_error(SRCS[s], err)")
        lines.append(f"    COUNT({len(steps)}, {len(steps)})")
    lines.append(f"    out = [{', '.join(f'p[{j}]' for j in prep._results)}]")
    if prep._views:
        lines.append("    SELF._rebuild_views(out, inputs)")
    if prep._finish is not None:
        env["FINISH"] = prep._finish
        lines.append("    return FINISH(inputs, out)")
    else:
        lines.append("    return out")
    exec("\n".join(lines), env)  # noqa: S102 - generated from the program's own numbers
    straight = env["straight"]
    straight.source = "\n".join(lines)
    return straight
