"""Every ``PYFUSER_*`` setting in one table, readable as ``pyfuser.config``.

    import pyfuser
    pyfuser.config.dump                      # the current value (PYFUSER_DUMP, parsed)
    pyfuser.config.cuda_graphs = False       # set for the process (over the environment)
    with pyfuser.config.patch(dump="kernel_code"):
        ...                                  # set inside the block only
    torch.compile(model, backend="pyfuser", options={"check": True, "dump": "kernel_code"})

``SETTINGS`` holds, per setting, its name (the attribute and the ``torch.compile``
option), its environment variable, kind, default and meaning; docs/SETTINGS.md is
generated from it (``python -m pyfuser.settings docs/SETTINGS.md``, checked by
tests/test_settings.py).  A value comes from, in order: ``config.patch`` blocks and
``torch.compile`` options (innermost first), ``config.<name> = value``, the
environment, the default.  The environment is read each time a setting is asked for
(tests and users change it at run time) and parsed once per distinct text; a value
pyfuser cannot use raises ``SettingError`` naming the variable, what it expects and
what it got.

Overrides are the process's, not a thread's: AOTAutograd runs backward graphs on
its own threads, and an option given to ``torch.compile`` must reach them.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings
from dataclasses import dataclass

from .errors import SettingError

# PYFUSER_DUMP's names (runtime/dump.py says what each prints).
DUMP_NAMES = ("python_definition", "fusion_args", "scheduler_params", "segmented_fusion", "launch_params",
              "kernel_code", "ptx", "kernel_time", "cache")
LOG_LEVELS = ("", "info", "debug")
# PYFUSER_DEVICE_MODEL's names: the presets of ``schedulers.device_model``.
DEVICE_MODELS = ("h200", "h100", "a100", "sm89")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("", "0", "false", "no", "off")


@dataclass(frozen=True)
class Setting:
    name: str  # pyfuser.config.<name>, and the torch.compile option's key
    env: str  # the environment variable
    kind: str  # "bool", "int" (positive), "count" (>= 0), "seconds" (>= 0), "path", "names" (comma list of choices), "choice", "text"
    default: object
    doc: str
    option: bool = False  # accepted in torch.compile(..., options={...}) (per compiled model)
    scope: str = "user"  # "user", or "development": read by the project's tests and benchmark runs
    choices: tuple = ()


SETTINGS = (
    Setting("dump", "PYFUSER_DUMP", "names", frozenset(),
            "debug text on stdout, nvFuser style (docs/DEBUGGING.md#pyfuser_dump); read at every execute",
            option=True, choices=DUMP_NAMES),
    Setting("prof", "PYFUSER_PROF", "choice", "",
            "`print`: profile every execute and print its table (docs/DEBUGGING.md, the profiler)",
            option=True, choices=("", "print")),
    Setting("check", "PYFUSER_CHECK", "bool", False,
            "torch.compile: run every fused region, fast-path view and rewritten graph beside ATen and raise "
            "`AccuracyError` at the first difference; read when a model is compiled", option=True),
    Setting("cuda_graphs", "PYFUSER_CUDA_GRAPHS", "bool", True,
            "torch.compile: replay training graphs as CUDA graphs where their checks allow; read when a graph "
            "is compiled", option=True),
    Setting("log", "PYFUSER_LOG", "choice", "",
            "torch.compile: `info` logs what each graph fused and why the rest was not "
            "(as `TORCH_LOGS=pyfuser`), `debug` adds each region's FusionDefinition and kernels "
            "(as `TORCH_LOGS=+pyfuser`), on stderr", option=True, choices=LOG_LEVELS),
    Setting("progress", "PYFUSER_PROGRESS", "seconds", 5.0,
            "torch.compile: a graph still compiling (or building its kernels) after this many seconds says so "
            "on stderr, and again every 10 s; 0: never", option=True),
    Setting("compile_workers", "PYFUSER_COMPILE_WORKERS", "count", 16,
            "torch.compile on the GPU: worker processes that compile a graph's kernels before its first run "
            "(at most one less than the machine's cores); 0: each kernel compiles at its first launch"),
    Setting("compile_workers_idle", "PYFUSER_COMPILE_WORKERS_IDLE", "seconds", 60.0,
            "a compile worker with no job for this many seconds exits, giving its memory back (the next job "
            "starts another); 0: the workers stay until the process ends"),
    Setting("cache_dir", "PYFUSER_CACHE_DIR", "path", "",
            "where generated kernels are written and imported from (default: `<tmp>/pyfuser-<uid>`); "
            "must be private to the user"),
    Setting("repro_dir", "PYFUSER_REPRO_DIR", "path", "",
            "where a failing compile writes its repro script (default: `repro/` in the cache directory)"),
    Setting("cache_files", "PYFUSER_CACHE_FILES", "int", 2048,
            "kernel files kept in the cache directory (the oldest go first)"),
    Setting("decisions", "PYFUSER_DECISIONS", "count", 4096,
            "answers kept for later processes in the cache directory's `decisions/` (ptxas's register "
            "reports; runtime/decisions.py), the least recently used going first; 0: none kept or read"),
    Setting("kernel_modules", "PYFUSER_KERNEL_MODULES", "int", 512,
            "kernel modules imported in the process at once (the least recently used leave)"),
    Setting("prepared_sizes", "PYFUSER_PREPARED_SIZES", "int", 64,
            "prepared launches kept per fusion, one per input fingerprint (sizes, strides, dtypes)"),
    Setting("device_model", "PYFUSER_DEVICE_MODEL", "choice", "",
            "plan and generate kernels as if for this GPU (a preset of `schedulers/device_model.py`) instead "
            "of the present one (docs/CODEGEN.md, the device model); read when a fusion is planned",
            choices=("",) + DEVICE_MODELS),
    Setting("poison_outputs", "PYFUSER_POISON_OUTPUTS", "bool", False,
            "fill every output with NaN (or its integer extreme) before kernels write it, so an element "
            "no kernel writes shows; read when pyfuser is imported"),
    Setting("commit", "PYFUSER_COMMIT", "text", "",
            "`python -m pyfuser.bench`: the commit to record for a run of a tree without `.git`",
            scope="development"),
    Setting("sweep_device", "PYFUSER_SWEEP_DEVICE", "choice", "cpu",
            "tests/codegen/test_kernel_op_sweep.py: the device the kernel op sweep runs on (`make gpu-test`: cuda)",
            scope="development", choices=("cpu", "cuda")),
    Setting("dist_zoo", "PYFUSER_DIST_ZOO", "text", "",
            "tests/distributed: zoo models to train under DDP and FSDP2 (comma list, or `all`; docs/DISTRIBUTED.md)",
            scope="development"),
)
BY_NAME = {s.name: s for s in SETTINGS}
OPTIONS = tuple(s.name for s in SETTINGS if s.option)

# -- reading the environment fast ----------------------------------------------------------
ENV_DATA = getattr(os.environ, "_data", None)  # CPython: the dict behind os.environ, kept current by its setters
_KEYS: dict = {}


def getenv(name: str) -> str:
    """``os.environ.get(name, "")``, several times faster (a missing key costs
    os.environ a KeyError; docs/TUNING.md#host-time): every execute reads PYFUSER_DUMP
    and PYFUSER_PROF."""
    if ENV_DATA is None:
        return os.environ.get(name, "")
    key = _KEYS.get(name)
    if key is None:
        key = _KEYS[name] = os.environ.encodekey(name)
    value = ENV_DATA.get(key)
    return "" if value is None else os.environ.decodevalue(value)


# -- parsing -------------------------------------------------------------------------------
# Numeric kinds: (conversion, whether a converted value is acceptable, what is expected).
_NUMBERS = {
    "int": (int, lambda n, text: not isinstance(text, float) and n >= 1, "a positive integer"),
    "count": (int, lambda n, text: not isinstance(text, float) and n >= 0, "an integer >= 0"),
    "seconds": (float, lambda s, text: s >= 0, "a number of seconds >= 0"),
}


def parse(setting: Setting, value, where: str | None = None):
    """``value`` (the environment's text, or a Python value from an option or an
    assignment) as ``setting``'s kind; ``SettingError`` names ``where`` (default: the
    variable) when pyfuser cannot use it."""
    where = where or setting.env
    kind = setting.kind
    text = value.strip() if isinstance(value, str) else value
    if kind == "bool":
        if isinstance(text, bool):
            return text
        if isinstance(text, int) and text in (0, 1):
            return bool(text)
        if isinstance(text, str) and text.lower() in _TRUE + _FALSE:
            return text.lower() in _TRUE
        raise SettingError(f"{where}: expected 1 or 0 (true/false, on/off), got {value!r}")
    if kind in _NUMBERS:
        convert, fits, expected = _NUMBERS[kind]
        if text in ("", None):
            return setting.default
        try:
            n = convert(text)
        except (TypeError, ValueError):
            n = None
        if n is None or isinstance(text, bool) or not fits(n, text):
            raise SettingError(f"{where}: expected {expected}, got {value!r}")
        return n
    if kind == "names":
        return _names(setting, text, where, value)
    if text is None or not isinstance(text, str):
        raise SettingError(f"{where}: expected text, got {value!r}")
    if kind == "choice":
        text = text.lower()
        if text == "0" and "" in setting.choices:
            return ""
        if text not in setting.choices:
            raise SettingError(f"{where}: unknown value {value!r}; valid: "
                               f"{', '.join(c for c in setting.choices if c) or 'nothing'}")
    return text


def _names(setting, text, where, value) -> frozenset:
    if isinstance(text, str):
        names = frozenset(n.strip() for n in text.split(",") if n.strip())
    elif isinstance(text, (list, tuple, set, frozenset)) and all(isinstance(n, str) for n in text):
        names = frozenset(n.strip() for n in text if n.strip())
    elif text is None:
        names = frozenset()
    else:
        raise SettingError(f"{where}: expected comma-separated names (or a list of them), got {value!r}")
    bad = sorted(names - set(setting.choices))
    if bad:
        raise SettingError(f"{where}: unknown option(s) {', '.join(bad)}; valid options: "
                           f"{', '.join(setting.choices)}")
    return names


_parsed: dict = {}  # (setting name, environment text) -> value
OVERRIDES: dict = {}  # setting name -> value: config.<name> = ..., config.patch, torch.compile options
_stack: list = []  # the patches in force: (name, value) tuples, innermost last
_assigned: dict = {}  # config.<name> = value
_LOCK = threading.Lock()


def from_env(name: str):
    """Setting ``name``'s value from the environment (or its default)."""
    s = BY_NAME[name]
    raw = getenv(s.env)
    key = (name, raw)
    try:
        return _parsed[key]
    except KeyError:
        pass
    value = parse(s, raw) if raw.strip() else s.default
    _parsed[key] = value
    return value


def read(name: str):
    """Setting ``name``'s current value (the module docstring gives the order)."""
    if name in OVERRIDES:
        return OVERRIDES[name]
    return from_env(name)


def overridden() -> bool:
    """Whether any setting is overridden now: the hot paths' cheap first test."""
    return bool(OVERRIDES)


def _rebuild():
    merged = dict(_assigned)
    for entries in _stack:
        merged.update(entries)
    OVERRIDES.update(merged)  # in place (readers hold the dict), never empty while a setting stays
    for name in [n for n in OVERRIDES if n not in merged]:
        del OVERRIDES[name]


def checked(values: dict, where: str = "pyfuser.config") -> dict:
    """``values`` (setting name -> value) parsed; ``SettingError`` for an unknown name or
    a value pyfuser cannot use."""
    out = {}
    for name, value in values.items():
        s = BY_NAME.get(name)
        if s is None:
            raise SettingError(f"{where}: unknown setting {name!r}; settings: {', '.join(BY_NAME)}")
        out[name] = parse(s, value, f"{where}: {name} ({s.env})")
    return out


@contextlib.contextmanager
def patch(**values):
    """Settings ``values`` in force inside the block (for every thread)."""
    entries = checked(values, "pyfuser.config.patch")
    with _LOCK:
        _stack.append(entries)
        _rebuild()
    try:
        yield
    finally:
        with _LOCK:
            _stack.remove(entries)
            _rebuild()


def validate_environment():
    """Parse every ``PYFUSER_*`` variable set now, so a typo fails where it is met
    (``torch.compile`` calls this before compiling a graph)."""
    for s in SETTINGS:
        if s.name not in OVERRIDES:
            from_env(s.name)


def unknown_variables() -> list:
    """``PYFUSER_*`` variables set in the environment that no setting reads."""
    known = {s.env for s in SETTINGS}
    return sorted(k for k in os.environ if k.startswith("PYFUSER_") and k not in known)


class Config:
    """``pyfuser.config``: every setting as an attribute (``SETTINGS``)."""

    def __getattr__(self, name):
        if name not in BY_NAME:
            raise AttributeError(f"pyfuser.config has no setting {name!r}; settings: {', '.join(BY_NAME)}")
        return read(name)

    def __setattr__(self, name, value):
        entries = checked({name: value})
        with _LOCK:
            _assigned.update(entries)
            _rebuild()

    def __delattr__(self, name):
        """Back to the environment's value."""
        with _LOCK:
            _assigned.pop(name, None)
            _rebuild()

    def __dir__(self):
        return list(BY_NAME) + ["patch", "reset", "as_dict", "source"]

    patch = staticmethod(patch)

    def reset(self):
        """Forget every ``config.<name> = value`` (patches in force stay)."""
        with _LOCK:
            _assigned.clear()
            _rebuild()

    def as_dict(self, scope: str | None = "user") -> dict:
        """Name -> current value of every setting (of ``scope``; None: all)."""
        return {s.name: read(s.name) for s in SETTINGS if scope is None or s.scope == scope}

    def source(self, name: str) -> str:
        """Where ``name``'s value comes from now: "override", "environment" or "default"."""
        if name in OVERRIDES:
            return "override"
        return "environment" if getenv(BY_NAME[name].env).strip() else "default"

    def __repr__(self):
        return "pyfuser.config(" + ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items()) + ")"


config = Config()


# -- warnings that point at the user's code ------------------------------------------------
_INTERNAL = ("pyfuser", "torch", "triton", "functorch", "contextlib", "importlib", "runpy", "warnings")


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in this function's caller that names
    the first frame outside pyfuser, torch and Triton: the warning then shows the
    user's line, not pyfuser's."""
    frame, level = sys._getframe(2), 2
    while frame is not None:
        module = frame.f_globals.get("__name__", "") or ""
        generated = frame.f_code.co_filename.startswith(("<eval_with_key", "<frozen"))  # FX's code, runpy's
        if module and module.split(".")[0] not in _INTERNAL and not generated:
            return level
        frame, level = frame.f_back, level + 1
    return 2


def warn_user(message: str, category=UserWarning):
    warnings.warn(message, category, stacklevel=user_stacklevel())


# -- docs/SETTINGS.md ----------------------------------------------------------------------


def _default_text(s: Setting) -> str:
    if s.kind == "names":
        return "(none)"
    if s.kind == "bool":
        return "1" if s.default else "0"
    if s.default in ("", None):
        return "(unset)"
    return f"{s.default:g}" if isinstance(s.default, float) else str(s.default)


def markdown_table(scope: str) -> str:
    rows = ["| variable | `pyfuser.config.` | `torch.compile` option | kind | default | what it does |",
            "|---|---|---|---|---|---|"]
    for s in SETTINGS:
        if s.scope != scope:
            continue
        kind = s.kind + (f": {', '.join(c for c in s.choices if c)}" if s.choices else "")
        rows.append(f"| `{s.env}` | `{s.name}` | {'yes' if s.option else 'no'} | {kind} | {_default_text(s)} | "
                    f"{s.doc} |")
    return "\n".join(rows)


DOC_HEAD = """# Settings

Every `PYFUSER_*` environment variable, generated from `src/pyfuser/settings.py`
(`python -m pyfuser.settings docs/SETTINGS.md`; tests/test_settings.py checks that this
page is current).  Each is also `pyfuser.config.<name>`: read it there, set it for the
process (`pyfuser.config.cuda_graphs = False`), or for a block
(`with pyfuser.config.patch(dump="kernel_code"): ...`).  Those marked as options are
accepted by the backend per compiled model, as Inductor's are:

```python
torch.compile(model, backend="pyfuser", options={"check": True, "dump": "kernel_code", "log": "info"})
```

An unknown option, or a value pyfuser cannot use (a misspelt dump name), raises
`pyfuser.SettingError` when the model compiles.  A value comes from, first to last:
`config.patch` blocks and `torch.compile` options, `config.<name> = value`, the
environment, the default.  `python -m pyfuser` prints every setting's current value.
"""


def document() -> str:
    return (DOC_HEAD + "\n" + markdown_table("user") + "\n\n## For the project's own tests and benchmark runs\n\n"
            + markdown_table("development") + "\n")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as f:
            f.write(document())
    else:
        sys.stdout.write(document())
