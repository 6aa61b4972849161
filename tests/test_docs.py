"""The README's Python code blocks and the package's docstring examples (doctest `>>>` lines)
run as written, on the best available device, so a broken quick start cannot land again."""
import doctest
import importlib
import pathlib
import pkgutil
import re

import pytest

import tensorlite

ROOT = pathlib.Path(__file__).resolve().parents[1]
README_BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
# the frontend's modules (the backends' docstrings describe internals, not user examples)
MODULES = ["tensorlite"] + [m.name for m in pkgutil.walk_packages(tensorlite.__path__, "tensorlite.")
                            if not m.name.startswith("tensorlite.backends")]


@pytest.mark.parametrize("code", README_BLOCKS, ids=[f"block{i}" for i in range(len(README_BLOCKS))])
def test_readme_python_block_runs(code):
    exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})


def test_readme_has_python_blocks():
    assert README_BLOCKS


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples_run(module):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    # each example starts from empty globals, as a user's session does (`import tensorlite as tl`)
    for test in doctest.DocTestFinder().find(importlib.import_module(module), globs={}):
        runner.run(test)
    assert runner.failures == 0, f"{runner.failures} docstring example(s) of {module} failed (output above)"


def test_the_package_docstring_has_examples():
    found = doctest.DocTestFinder().find(tensorlite)
    assert sum(len(t.examples) for t in found) >= 3
