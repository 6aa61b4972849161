"""Runtime compiles in a child process, so that a compiler crash never takes the user's down.

hiprtc and NVRTC are libraries: they compile inside the process that calls them, and a
segmentation fault in one (seen once in hiprtc on a cold cache) kills that process with the
user's work in it. compiler.py therefore hands each cold compile of such a compiler to a
child, `python -m <this module>`: the request (the compiler's recipe, source, headers,
options) goes in on stdin, the code object or the compiler's error comes back on stdout.
A child that dies (a signal, an abort) or runs past the timeout is tried once more, then
the parent raises CompileError naming the family, target and compiler, with what the child
wrote to stderr (faulthandler's traceback, the compiler's output).

Why a fresh interpreter (subprocess of `python -m`) and not multiprocessing: 'spawn' and
'forkserver' re-run the user's __main__ module in the child (a script without an
`if __name__ == "__main__"` guard would run again, or fail at start-up), and 'fork' after
CUDA or HIP initialisation is unsafe. A subprocess starts from nothing but this module,
whatever the user's program looks like; its cost (an interpreter and the backend's
imports, about 0.5 s) is paid only by a cold compile, never by a cache hit.

The child rebuilds the compiler from a recipe: its class (module and name) and the
arguments of its constructor, read back from the attributes of the same names (HipPlatform's
`root`, the folder of another ROCm). Compilers that run in the process and can be rebuilt so
are the platforms whose rtc_compile is PlatformBase's (hiprtc, NVRTC); clang-19 is its own
process already, and the null platform compiles nothing, so they compile in the caller.
"""
from __future__ import annotations

import faulthandler
import importlib
import inspect
import os
import pickle
import signal
import subprocess
import sys
from typing import Optional, Tuple

from tensorlite.errors import CompileError
from . import PlatformBase

TIMEOUT_ENV = "TENSORLITE_COMPILE_TIMEOUT"    # seconds one child may compile (default DEFAULT_TIMEOUT)
ISOLATION_ENV = "TENSORLITE_COMPILE_ISOLATION"  # "0": compile in this process (no child)
DEFAULT_TIMEOUT = 1800.0  # the largest family takes minutes on a loaded 2-core host
ATTEMPTS = 2              # a crash or timeout is retried once: the fault seen was not reproducible
STDERR_TAIL = 8000        # characters of the child's stderr kept in the error


def recipe(platform) -> Optional[Tuple[str, str, dict]]:
    """(module, class name, constructor arguments) that rebuild the compiler of `platform` in
    a child, or None where it compiles in this process: isolation is off, its rtc_compile is
    not PlatformBase's (clang's own process, the null platform), or this process replaced it."""
    if os.environ.get(ISOLATION_ENV, "").strip() == "0" or "rtc_compile" in vars(platform) or not sys.executable:
        return None  # (no sys.executable: an embedded interpreter, which cannot start another)
    compiler = getattr(platform, "compiler", platform)  # amdemu compiles with hiprtc's platform or clang
    cls = type(compiler)
    if not isinstance(compiler, PlatformBase) or cls.rtc_compile is not PlatformBase.rtc_compile \
            or "rtc_compile" in vars(compiler):
        return None
    params = inspect.signature(cls).parameters
    return cls.__module__, cls.__qualname__, {p: getattr(compiler, p) for p in params if hasattr(compiler, p)}


def timeout() -> float:
    value = os.environ.get(TIMEOUT_ENV, "").strip()
    try:
        return float(value) if value else DEFAULT_TIMEOUT
    except ValueError:
        raise CompileError(f"{TIMEOUT_ENV}={value!r} is not a number of seconds") from None


def _how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def compile_in_child(rebuild, source: str, name: str, headers: dict, options, what: str) -> bytes:
    """The code object of `source`, compiled by the compiler `rebuild` (recipe()) in a child.
    `what` names the family, target and compiler in errors. The compiler's own error is
    raised at once; a crash or timeout is retried once, then raised as CompileError."""
    request = pickle.dumps({"recipe": rebuild, "source": source, "name": name, "headers": dict(headers),
                            "options": list(options)})
    # the child imports this tensorlite, and the compiler's module, from where this process did
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    limit, failures = timeout(), []
    for attempt in range(ATTEMPTS):
        child = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env)
        try:
            out, err = child.communicate(request, timeout=limit)
        except subprocess.TimeoutExpired:
            child.kill()
            out, err = child.communicate()
            ended = f"no result within {limit:g} s ({TIMEOUT_ENV})"
        except BaseException:  # KeyboardInterrupt: the child must not compile on alone
            child.kill()
            child.wait()
            raise
        else:
            ended = _how_it_ended(child.returncode)
        if child.returncode == 0:
            try:
                status, value = pickle.loads(out)
            except Exception:  # a child that ended well but said nothing we can read
                status, value = "unreadable", None
            if status == "ok":
                return value
            if status == "error":  # the compiler rejected the source: the same again on a retry
                raise CompileError(value)
            ended = "exit status 0 without a result"
        log = err.decode(errors="replace").strip()[-STDERR_TAIL:]
        failures.append(f"attempt {attempt + 1}: {ended}" + (f"; its stderr:\n{log}" if log else " (stderr empty)"))
    raise CompileError(f"the compiler crashed compiling {what} in a child process ({ATTEMPTS} attempts; this "
                       f"process is unharmed):\n" + "\n".join(failures))


def main() -> None:
    """The child: one request from stdin, (status, value) pickled to the original stdout."""
    result = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever the compiler prints goes to stderr, not into the result
    faulthandler.enable()  # a crash leaves its traceback on stderr, for the parent's error
    request = pickle.load(sys.stdin.buffer)
    module, qualname, kwargs = request["recipe"]
    cls = importlib.import_module(module)
    for part in qualname.split("."):
        cls = getattr(cls, part)
    compiler = cls(**kwargs)
    try:
        answer = ("ok", compiler.rtc_compile(request["source"], request["name"], request["headers"],
                                             request["options"]))
    except CompileError as e:
        answer = ("error", str(e))
    pickle.dump(answer, result)
    result.close()


if __name__ == "__main__":
    main()
