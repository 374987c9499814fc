"""The small program that runs inside the sandbox, next to the submission.

It is the only grader code the submission's process ever contains, and it knows nothing worth
stealing: it imports the submission, calls the functions an exercise asks for on the inputs it
was handed, and sends back what they returned, as plain data.  Expected values, pass/fail and
scores never exist in this process; the grader compares the outputs in its own process.

The supervisor (``sandbox/supervisor.py``) loads this file and calls ``main`` in the process it forks,
after dropping that process's privileges: ``main([harness.py, IN_DIR, "--channel-fd", N,
"--site", DIRS, [--lib DIRS] [--nproc N] [--only ID,ID] [--public NAME [--functions F,G]]])``,
where

- ``IN_DIR/submission.py``: the source the grader extracted from the submission;
- ``IN_DIR/spec.json``: the limits, and the cases: ``{"id", "timeout", "calls": [{"fn", "args",
  "capture_args", ["methods"], ["raises"]}]}``; an argument may be ``{"$ref": [i, *path]}``, a part of what
  call ``i`` of the same case returned (decoding token by token feeds each step the cache the
  previous one made); ``methods`` ``[{"name", "args"}]`` are run on the object the call returned
  (a class the learner wrote), where ``$ref`` names an earlier step (``_run_methods``); with
  ``"raises": true`` an exception the call raises is recorded with its classes (as a method
  step's is) and the case goes on to its next call;
- ``IN_DIR/inputs.npz``: the arrays the cases refer to (``{"$nd": key}``).

An argument may also be ``{"$module": {"name", "package", "code": {"$nd": key}}}``: a module the
harness makes before the submission is loaded, by running a module body the grader compiled
(``marshal`` bytes) in a fresh module object.  It has no file and no source text.  Only the
harness decodes this kind, and only from the grader's own job folder: what comes back from the
sandbox is never run (``decode`` refuses a module unless it is given the harness's ``modules``).

Everything goes back on the channel file descriptor as one JSON object per line: ``hello``,
``import``, then ``start``/``result`` per case, then ``done``.  Nothing is sent on stdout, so
nothing the submission prints is ever read as a result; and since a malicious submission can
write to the channel too, the grader treats every message as untrusted data.

This file also holds the codec both sides use (``encode``/``decode``): arrays travel as ``.npy``
bytes read back with ``allow_pickle=False``, Python ints as exact decimal strings, sets of plain
values as sets, and anything else as its type name only.  Only the standard library and numpy are used here, because the
``graders`` package is not visible inside the sandbox.
"""
from __future__ import annotations

import base64
import importlib.util
import io
import json
import os
import signal
import sys
import time

# The harness starts in every sandboxed run, with ``-S`` and no site folders until ``main`` has read
# ``--site``: what one path needs is imported on that path (numpy once its folder is on sys.path
# and there are arrays, ``resource`` for the limits, ``public_checks`` for ``check`` only, and
# ``traceback``, ``marshal``, ``builtins`` when a value needs them), so a run pays for no other.

# ----------------------------------------------------------------------------------------- codec

MAX_DEPTH = 16
MAX_ITEMS = 100_000          # containers' items, in total, per encoded value
MAX_ARRAY_BYTES = 8 << 20    # per array (the exercises' arrays are tiny)
MAX_TEXT = 2_000             # characters of a string kept


class Opaque:
    """A value that could not travel as data: only its type's name is known."""

    def __init__(self, type_name: str, why: str = ""):
        self.type_name = type_name
        self.why = why

    def __repr__(self) -> str:
        return f"<{self.type_name}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, Opaque) and other.type_name == self.type_name

    def __hash__(self) -> int:
        return hash(("Opaque", self.type_name))


def _type_name(value) -> str:
    """The qualified name of ``value``'s type, read through ``type``'s own descriptors so that a
    hostile class or metaclass cannot run code here."""
    cls = type(value)
    try:
        name = type.__dict__["__qualname__"].__get__(cls, type)
        module = type.__dict__["__module__"].__get__(cls, type)
    except Exception:  # noqa: BLE001
        return "object"
    if not isinstance(name, str):
        name = "object"
    if not isinstance(module, str):
        module = ""
    return _qualified(cls, module, name)


def _qualified(cls, module: str, name: str) -> str:
    """``name`` alone for one of Python's own classes (``ValueError``), ``module.name`` for any
    other: a class is Python's own only if it *is* the builtin of that name, whatever its
    ``__module__`` says (a look-alike ``class ValueError(Exception)`` is ``submission.ValueError``)."""
    import builtins
    if module in ("builtins", ""):
        try:
            made_by_a_class_statement = type.__dict__["__flags__"].__get__(cls, type) & _HEAP_TYPE
        except Exception:  # noqa: BLE001
            made_by_a_class_statement = True
        if vars(builtins).get(name) is cls or not made_by_a_class_statement:   # ValueError; method, NoneType
            return name
        return f"{module or 'unknown'}.{name}" if module != "builtins" else f"not-builtins.{name}"
    return f"{module}.{name}"


_HEAP_TYPE = 1 << 9       # Py_TPFLAGS_HEAPTYPE: a class made at run time (a class statement), not one of C's


def array_to_bytes(array) -> bytes:
    buf = io.BytesIO()
    import numpy as np
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def array_from_bytes(data: bytes):
    import numpy as np
    return np.load(io.BytesIO(data), allow_pickle=False)


def encode(value, store=None, _budget=None, _depth=0):
    """``value`` as JSON-able data.  ``store(array) -> node`` decides where arrays go (inline by
    default).  Never calls a method of an object it does not know the exact type of.

    A codec with one branch per type it encodes, kept whole so that the types it knows read as
    one list beside ``decode``'s (the course's shape test lists it as an exception)."""
    np = sys.modules.get("numpy")    # no numpy loaded: no numpy value can exist

    budget = _budget if _budget is not None else [MAX_ITEMS]
    budget[0] -= 1
    if budget[0] < 0 or _depth > MAX_DEPTH:
        return {"$obj": "too large"}
    t = type(value)
    if value is None or t is bool:
        return value
    if t is int:
        return {"$int": str(value)}
    if t is float:
        return {"$float": repr(value)}
    if t is str:
        return value[:MAX_TEXT]
    if np is None:
        pass
    elif isinstance(value, np.ndarray):
        arr = np.asarray(value)
        if arr.dtype.hasobject or arr.dtype.kind not in "biufcSUMm?":
            return {"$obj": f"numpy.ndarray of dtype {arr.dtype}", "why": "not plain data"}
        if arr.nbytes > MAX_ARRAY_BYTES:
            return {"$obj": f"numpy.ndarray of shape {arr.shape}", "why": "too large"}
        node = store(arr) if store else {"$npy": base64.b64encode(array_to_bytes(arr)).decode("ascii")}
        if t is not np.ndarray:
            node["cls"] = _type_name(value)
        return node
    elif isinstance(value, np.generic):
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            return {"$obj": _type_name(value)}
        node = store(arr) if store else {"$npy": base64.b64encode(array_to_bytes(arr)).decode("ascii")}
        return {"$npscalar": node}
    if (t is list or t is tuple or t is dict or t is set or t is frozenset) and len(value) > budget[0]:
        return {"$obj": f"{t.__name__} of {len(value)} items", "why": "too large"}   # exact types: len runs no user code
    if t is list or t is tuple:
        items = [encode(v, store, budget, _depth + 1) for v in value]
        return {"$list" if t is list else "$tuple": items}
    if t is set or t is frozenset:
        # Only plain items: iterating the set hashes nothing new, but a hostile item's __eq__
        # could run while the grader rebuilds the set, so such items travel as type names.
        items = [encode(v, store, budget, _depth + 1) for v in list(value)]
        return {"$set" if t is set else "$frozenset": items}
    if t is dict:
        return {"$dict": [[encode(k, store, budget, _depth + 1), encode(v, store, budget, _depth + 1)]
                          for k, v in list(value.items())]}
    return {"$obj": _type_name(value)}


def decode(node, load=None, refs=None, modules=None):
    """The inverse of ``encode``.  ``load(node)`` reads an array stored elsewhere (``$nd``);
    ``refs(path)`` resolves ``$ref`` and ``modules(node)`` gives the module a ``$module`` node
    stands for (both only inside the sandbox, for the grader's own inputs).

    A codec with one branch per tag (``$int``, ``$nd``, ``$tuple``...), kept whole so that every
    tag it accepts reads as one list beside ``encode``'s (the course's shape test lists it as an
    exception)."""
    if node is None or isinstance(node, (bool, str)):
        return node
    if isinstance(node, (int, float)):          # plain JSON numbers (only the grader writes those)
        return node
    if isinstance(node, list):
        raise ValueError("bare JSON list")
    if not isinstance(node, dict) or len(node) == 0:
        raise ValueError("not an encoded value")
    if "$int" in node:
        text = node["$int"]
        if not isinstance(text, str) or len(text) > 4300:
            raise ValueError("bad int")
        return int(text)
    if "$float" in node:
        return float(node["$float"])
    if "$npy" in node:
        data = node["$npy"]
        if not isinstance(data, str) or len(data) > MAX_ARRAY_BYTES * 2:
            raise ValueError("bad array")
        return array_from_bytes(base64.b64decode(data, validate=True))
    if "$nd" in node:
        if load is None:
            raise ValueError("no array store")
        return load(node)
    if "$npscalar" in node:
        arr = decode(node["$npscalar"], load, refs)
        if getattr(arr, "ndim", None) != 0:
            raise ValueError("bad numpy scalar")
        return arr[()]
    if "$list" in node:
        return [decode(v, load, refs, modules) for v in _as_list(node["$list"])]
    if "$tuple" in node:
        return tuple(decode(v, load, refs, modules) for v in _as_list(node["$tuple"]))
    if "$set" in node or "$frozenset" in node:
        items = [decode(v, load, refs, modules) for v in _as_list(node.get("$set", node.get("$frozenset")))]
        for item in items:
            if not isinstance(item, (str, int, float, bool, tuple, Opaque)) and item is not None:
                raise ValueError("bad set item")
            try:
                hash(item)
            except TypeError:
                raise ValueError("bad set item") from None
        return set(items) if "$set" in node else frozenset(items)
    if "$dict" in node:
        out = {}
        for pair in _as_list(node["$dict"]):
            if not isinstance(pair, list) or len(pair) != 2:
                raise ValueError("bad dict item")
            key = decode(pair[0], load, refs, modules)
            try:
                hash(key)
            except TypeError:
                key = repr(key)
            out[key] = decode(pair[1], load, refs, modules)
        return out
    if "$ref" in node:
        if refs is None:
            raise ValueError("reference outside a case")
        return refs(node["$ref"])
    if "$module" in node:
        if modules is None:
            raise ValueError("a module outside the sandbox's inputs")
        return modules(node)
    if "$obj" in node:
        return Opaque(str(node["$obj"])[:200], str(node.get("why", ""))[:200])
    raise ValueError("unknown encoding")


def make_module(spec: dict, load):
    """The module a ``$module`` node stands for: the grader's compiled module body (``marshal``
    bytes in the inputs) run in a fresh module object, registered in ``sys.modules`` under its
    name (its dataclasses look themselves up there).  No ``__file__``, no loader, no linecache
    entry: there is no source text to find.  Only for the grader's own inputs."""
    import marshal
    import types
    name, package = str(spec["name"]), str(spec.get("package", ""))
    code = marshal.loads(bytes(load(spec["code"])))
    if not isinstance(code, types.CodeType):
        raise ValueError("a module's code must be a code object")
    module = types.ModuleType(name)
    module.__package__ = package
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _module_nodes(node, found: list) -> list:
    """Every ``$module`` node inside an encoded value (in order)."""
    if isinstance(node, dict):
        if "$module" in node:
            found.append(node)
        else:
            for value in node.values():
                _module_nodes(value, found)
    elif isinstance(node, list):
        for value in node:
            _module_nodes(value, found)
    return found


def _as_list(value):
    if not isinstance(value, list):
        raise ValueError("expected a list")
    return value


# --------------------------------------------------------------------------- inside the sandbox


class _Timeout(BaseException):
    """Raised in the submission's code when a case's time is up."""


_deadline = [0.0]     # when the armed timer is due (monotonic clock)


def _on_alarm(signum, frame):
    # Only the harness's own timer ends a call: a SIGALRM the submission sends itself (kill,
    # pthread_kill) before the deadline is ignored, so it cannot pass a crash off as a timeout.
    if time.monotonic() >= _deadline[0] - 0.01:
        raise _Timeout()


class Channel:
    """One JSON object per line on the file descriptor the grader reads."""

    def __init__(self, fd: int):
        self.fd = fd

    def send(self, message: dict) -> None:
        data = (json.dumps(message, separators=(",", ":"), allow_nan=False) + "\n").encode()
        view = memoryview(data)
        try:
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except OSError:
            pass  # the grader went away or the submission closed the channel: nothing to do


def _apply_limits(limits: dict) -> None:
    import resource
    pairs = {
        "memory_bytes": resource.RLIMIT_AS,
        "cpu_seconds": resource.RLIMIT_CPU,
        "file_bytes": resource.RLIMIT_FSIZE,
        "open_files": resource.RLIMIT_NOFILE,
        "processes": getattr(resource, "RLIMIT_NPROC", None),
    }
    for key, which in pairs.items():
        value = limits.get(key)
        if which is None or not value:
            continue
        try:
            soft, hard = resource.getrlimit(which)
            value = int(value)
            new_hard = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(which, (new_hard, new_hard))
        except (ValueError, OSError):
            pass
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass


def _where(tb, filename: str):
    """The last frame of the submission's own code in a traceback: (line, function)."""
    import traceback        # only when something failed: it costs start-up
    found = None
    for frame in traceback.extract_tb(tb):
        if frame.filename == filename:
            found = (frame.lineno, frame.name)
    return found


def _error(err: BaseException, filename: str) -> dict:
    try:
        text = str(err)
    except BaseException:  # noqa: BLE001 - a hostile __str__
        text = ""
    try:
        where = _where(err.__traceback__, filename)
    except BaseException:  # noqa: BLE001 - e.g. out of memory while importing traceback
        where = None
    info = {"type": _type_name(err), "message": text[:400]}
    if isinstance(err, SyntaxError) and err.filename == filename and err.lineno:
        where = (err.lineno, "<module>")
    if where:
        info["line"], info["function"] = where[0], str(where[1])[:100]
    return info


def _arm(seconds: float) -> None:
    signal.signal(signal.SIGALRM, _on_alarm)
    _deadline[0] = time.monotonic() + max(0.001, seconds)
    signal.setitimer(signal.ITIMER_REAL, max(0.001, seconds))


def _disarm() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)
    _deadline[0] = float("inf")


def _mro_names(err: BaseException) -> list[str]:
    """The names of the classes ``err`` is an instance of, read through ``type``'s own
    descriptors (a hostile class cannot run code here)."""
    try:
        mro = type.__dict__["__mro__"].__get__(type(err), type)
    except Exception:  # noqa: BLE001
        return []
    return [_type_name_of_class(c) for c in mro[:16]]


def _type_name_of_class(cls) -> str:
    try:
        name = type.__dict__["__qualname__"].__get__(cls, type)
        module = type.__dict__["__module__"].__get__(cls, type)
    except Exception:  # noqa: BLE001
        return "object"
    name = name if isinstance(name, str) else "object"
    return _qualified(cls, module if isinstance(module, str) else "", name)


def _run_methods(obj, steps: list, load, filename: str) -> list[dict]:
    """Run ``steps`` ({"name", "args": [...] or None}) on ``obj`` in order: a method call, or an
    attribute read when args is None.  An argument ``{"$ref": [k, ...]}`` is what step k
    returned.  Each step's outcome is data: {"ok": True, "value"} or {"ok": False, "error"}, an
    exception being one possible answer of a step; only the case's timer ends the script."""
    values, outcomes = [], []
    failed = object()

    def refs(path):
        if not isinstance(path, list) or not path or not isinstance(path[0], int) \
                or not 0 <= path[0] < len(values) or values[path[0]] is failed:
            raise ValueError("bad step reference")
        value = values[path[0]]
        for key in path[1:]:
            value = value[key]
        return value

    for step in steps:
        name, raw = step.get("name"), step.get("args")
        try:
            args = None if raw is None else [decode(a, load, refs) for a in raw]
        except _Timeout:
            raise
        except BaseException:  # noqa: BLE001 - the step it needs did not return a value
            values.append(failed)
            outcomes.append({"ok": False, "error": {"type": "InputError",
                                                    "message": "an earlier step it needs raised"}})
            continue
        try:
            attr = getattr(obj, str(name))
            value = attr if args is None else attr(*args)
        except _Timeout:
            raise
        except BaseException as err:  # noqa: BLE001 - the learner's exception is the step's answer
            values.append(failed)
            outcomes.append({"ok": False, "error": {**_error(err, filename), "bases": _mro_names(err)}})
            continue
        values.append(value)
        outcomes.append({"ok": True, "value": value})
    return outcomes


def _run_case(case: dict, module, arrays, filename: str, built: dict | None = None) -> dict:
    results = []
    built = built or {}

    def load(node):
        return arrays[node["$nd"]]

    def modules(node):
        if id(node) not in built:
            raise ValueError("a module the harness did not build")
        made = built[id(node)]
        if isinstance(made, BaseException):
            raise made
        return made

    def refs(path):
        if not isinstance(path, list) or not path:
            raise ValueError("bad reference")
        value = results_values[path[0]]
        for key in path[1:]:
            value = value[key]
        return value

    results_values = []
    _arm(float(case.get("timeout", 2.0)))
    try:
        for call in case["calls"]:
            try:
                args = [decode(a, load, refs, modules) for a in call["args"]]
            except _Timeout:
                raise
            except BaseException as err:  # noqa: BLE001 - the previous step's output was unusable
                what = ("could not make the module this test passes" if _module_nodes(call["args"], [])
                        else "could not pass on what the previous call returned")
                results.append({"ok": False, "error": {"type": "InputError",
                                                      "message": f"{what} ({_type_name(err)})"}})
                break
            fn = getattr(module, call["fn"], None)
            if not callable(fn):
                results.append({"ok": False, "error": {"type": "NameError",
                                                      "message": f"{call['fn']} is not a function"}})
                break
            # Shallow copies of dict arguments keep the original arrays reachable even when the
            # function rebinds a key (cache["k"] = ...), so in-place edits of them still show.
            originals = [dict(a) if type(a) is dict else a for a in args] \
                if call.get("capture_args") else None
            start = time.perf_counter()
            try:
                value = fn(*args)
                if call.get("methods"):       # drive the object it returned, step by step
                    value = _run_methods(value, call["methods"], load, filename)
            except _Timeout:
                raise
            except BaseException as err:  # noqa: BLE001 - SystemExit and friends are wrong answers
                if call.get("raises") is True:        # the exception is this call's answer
                    results_values.append(None)
                    results.append({"ok": False, "error": {**_error(err, filename), "bases": _mro_names(err)}})
                    continue
                results.append({"ok": False, "error": _error(err, filename)})
                break
            elapsed = time.perf_counter() - start
            results_values.append(value)
            entry = {"ok": True, "value": encode(value), "seconds": round(elapsed, 6)}
            if call.get("capture_args"):
                entry["args_after"] = encode(args)
                entry["originals_after"] = encode(originals)
            results.append(entry)
        _disarm()
        return {"calls": results}
    except _Timeout:
        _disarm()
        return {"calls": results, "timeout": True}
    except BaseException as err:  # noqa: BLE001 - e.g. MemoryError while encoding
        _disarm()
        return {"calls": results, "error": _error(err, filename)}


def main(argv: list[str]) -> None:
    in_dir = argv[1]
    opts = dict(zip(argv[2::2], argv[3::2]))
    channel = Channel(int(opts["--channel-fd"]))
    try:
        os.set_inheritable(channel.fd, False)   # children the submission execs do not get it
    except OSError:
        pass
    with open(os.path.join(in_dir, "spec.json")) as f:
        spec = json.load(f)
    _apply_limits({**spec.get("limits", {}), "processes": int(opts.get("--nproc", 0))})
    # -S: no site module, so no .pth file runs; the packages' folders are given explicitly.
    sys.path[:0] = [p for p in opts.get("--site", "").split(os.pathsep) if p]
    if opts.get("--lib"):         # course packages a job needs (the public checks, ga2), read-only
        sys.path[:0] = [p for p in opts["--lib"].split(os.pathsep) if p]
    channel.send({"t": "hello", "pid": os.getpid()})

    arrays = _Fresh(_load_arrays(in_dir))
    only = set(filter(None, opts.get("--only", "").split(",")))
    cases = [case for case in spec["cases"] if not only or case["id"] in only]
    built = _build_modules(cases, arrays)
    filename = os.path.join(in_dir, "submission.py")
    module = _import_submission(filename, spec, channel)

    public = opts.get("--public")
    if public:
        names = [n for n in opts.get("--functions", public).split(",") if n]
        _run_public(public, names, module, channel, float(spec.get("submission_timeout", 30.0)))
        os._exit(0)
    _run_cases(cases, int(spec.get("give_up_after_timeouts", 0) or 0), module, arrays, filename, built, channel)
    channel.send({"t": "done"})
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        pass
    os._exit(0)   # skip whatever atexit handlers the submission registered


class _Fresh(dict):
    """The job's arrays, a fresh copy for every call, so one call's mutations never reach the next case."""

    def __getitem__(self, key):
        return dict.__getitem__(self, key).copy()


def _load_arrays(in_dir: str) -> dict:
    """The job's input arrays (``inputs.npz``), read before the submission, so that its patches
    cannot change them."""
    npz_path = os.path.join(in_dir, "inputs.npz")
    if not os.path.exists(npz_path):
        return {}
    import numpy as np         # loaded only when there are arrays (it costs start-up)
    with np.load(npz_path, allow_pickle=False) as npz:
        return {key: npz[key] for key in npz.files}


def _build_modules(cases: list, arrays) -> dict:
    """The modules the cases pass, made before the submission is loaded, from the grader's code
    alone (a failure is that test's, raised when it runs): id of its node -> module or error."""
    built = {}
    for case in cases:
        for node in _module_nodes(case["calls"], []):
            try:
                built[id(node)] = make_module(node["$module"], lambda n: arrays[n["$nd"]])
            except Exception as err:  # noqa: BLE001
                built[id(node)] = err
    return built


def _import_submission(filename: str, spec: dict, channel: Channel):
    """The submission's module, loaded within the import time limit; the process ends here when
    it cannot be loaded (the channel says why)."""
    channel.send({"t": "import_start"})
    _arm(float(spec.get("import_timeout", 10.0)))
    try:
        module_spec = importlib.util.spec_from_file_location("submission", filename)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules["submission"] = module
        module_spec.loader.exec_module(module)
        _disarm()
    except _Timeout:
        channel.send({"t": "import", "ok": False, "timeout": True})
        os._exit(0)
    except BaseException as err:  # noqa: BLE001
        _disarm()
        channel.send({"t": "import", "ok": False, "error": _error(err, filename)})
        os._exit(0)
    failures = getattr(module, "__grader_import_failures__", {})
    channel.send({"t": "import", "ok": True,
                  "import_failures": {str(k)[:200]: str(v)[:200] for k, v in dict(failures).items()}
                  if isinstance(failures, dict) else {}})
    return module


def _run_cases(cases: list, give_up: int, module, arrays, filename: str, built: dict, channel: Channel) -> None:
    """Each case in turn, its outcome sent as soon as it is known; after ``give_up`` timeouts the
    process says so and ends (it hangs on everything: no need to wait for each test)."""
    timeouts = 0
    for case in cases:
        if give_up and timeouts >= give_up:
            channel.send({"t": "done", "gave_up": timeouts})
            os._exit(0)
        channel.send({"t": "start", "id": case["id"]})
        outcome = _run_case(case, module, arrays, filename, built)
        timeouts += bool(outcome.get("timeout"))
        outcome.update({"t": "result", "id": case["id"]})
        try:
            channel.send(outcome)
        except (TypeError, ValueError):
            channel.send({"t": "result", "id": case["id"], "calls": [],
                          "error": {"type": "EncodingError", "message": "the output could not be sent"}})


def _run_public(name: str, functions: list, module, channel: Channel, seconds: float) -> None:
    """``graders check``: the exercise's public checks, which are public, run here on the
    submission's ``functions`` (the exercise's, in order)."""
    fns = [getattr(module, fn, None) for fn in functions]
    _arm(seconds)
    try:
        import public_checks
        outcomes = [{"description": o.description, "status": o.status, "message": o.message[:600]}
                    for o in public_checks.evaluate(name, *fns)]
        _disarm()
        channel.send({"t": "public", "outcomes": outcomes})
    except _Timeout:
        channel.send({"t": "public", "timeout": True})
    except BaseException as err:  # noqa: BLE001
        _disarm()
        channel.send({"t": "public", "error": _error(err, "")})


if __name__ == "__main__":
    main(sys.argv)
