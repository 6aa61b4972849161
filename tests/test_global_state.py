"""The fuzz tests' guard against process-global state left by earlier tests (global_state.py,
conftest's _global_state_watch; issue 48): a session whose earlier test changes a setting and
does not restore it fails the next fuzz test, naming that test and the setting; a test that
restores what it changes leaves nothing behind."""
import os
import pathlib
import subprocess
import sys
import textwrap

TESTS = pathlib.Path(__file__).resolve().parent

# (what the earlier test does without restoring it, the setting the fuzz test must name)
LEAKS = {
    "default_dtype": ("tl.set_default_dtype(tl.float64)",
                      "tl.get_default_dtype() is tensorlite.float64, not tensorlite.float32"),
    "grad_mode": ("tl.set_grad_enabled(False)", "tl.is_grad_enabled() is False, not True"),
    "threads": ("tl.set_num_threads(tl.get_num_threads() + 3)", "tl.get_num_threads() is"),
    "numpy_errstate": ("np.seterr(all='raise')", "np.geterr() is {'divide': 'raise'"),
    "autocast": ("tl.autocast('cpu', dtype=tl.bfloat16).__enter__()", "tl.amp.is_autocast_enabled() is True"),
    "print_options": ("tl.set_printoptions(precision=1)", "tl.get_printoptions() is {'precision': 1"),
}


def _session(tmp_path, leaks: dict):
    """pytest on a file of tests under the suite's conftest's watch: one per leak (test_leak_<name>
    runs its code), one that changes the thread count and restores it, then a fuzz test."""
    # the suite's conftest as a module of another name (a conftest's fixtures serve its own directory)
    (tmp_path / "conftest.py").write_text(textwrap.dedent(f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location("suite_conftest", {str(TESTS / "conftest.py")!r})
        suite = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(suite)
        _global_state_watch = suite._global_state_watch
    """))
    leaking = "".join(f"def test_leak_{name}():\n    {code}\n\n\n" for name, (code, _) in leaks.items())
    (tmp_path / "test_order.py").write_text(textwrap.dedent("""
        import numpy as np
        from hypothesis import given, strategies as st
        import tensorlite as tl
        from fuzz_util import fuzz


    """) + leaking + textwrap.dedent("""
        def test_restores():
            before = tl.get_num_threads()
            tl.set_num_threads(before + 1)
            tl.set_num_threads(before)


        @fuzz(3)
        @given(x=st.integers())
        def test_fuzz(x):
            pass
    """))
    path = [str(TESTS), str(TESTS.parent), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", "test_order.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_a_fuzz_test_names_each_setting_left_changed_and_the_test_that_left_it(tmp_path):
    proc = _session(tmp_path, LEAKS)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and f"{len(LEAKS) + 1} passed, 1 error" in out, out
    error = next(line for line in out.splitlines() if line.startswith("E ") and "a fuzz test runs on" in line)
    for name, (_, message) in LEAKS.items():
        assert message in error and f"changed by test_order.py::test_leak_{name}" in error, (name, error)
    assert "test_restores" not in error


def test_settings_restored_leave_the_fuzz_test_alone(tmp_path):
    proc = _session(tmp_path, {})
    assert proc.returncode == 0 and "2 passed" in proc.stdout, proc.stdout + proc.stderr
