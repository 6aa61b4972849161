"""The Python code blocks of the README and of docs/*.md and the package's docstring examples
(doctest `>>>` lines) run as written, on the best available device, so a broken quick start cannot
land again; every relative link between those pages names a file (and a heading) that exists."""
import doctest
import importlib
import pathlib
import pkgutil
import re

import pytest

import tensorlite

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
# (page, block): only ```python blocks run; ```sh blocks are commands (installs, long jobs) shown as text
BLOCKS = [(page.relative_to(ROOT).as_posix(), code) for page in PAGES
          for code in re.findall(r"```python\n(.*?)```", page.read_text(), re.S)]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# the frontend's modules (the backends' docstrings describe internals, not user examples)
MODULES = ["tensorlite"] + [m.name for m in pkgutil.walk_packages(tensorlite.__path__, "tensorlite.")
                            if not m.name.startswith("tensorlite.backends")]


@pytest.mark.parametrize("page,code", BLOCKS,
                         ids=[f"{page}:block{sum(p == page for p, _ in BLOCKS[:i])}"
                              for i, (page, _) in enumerate(BLOCKS)])
def test_python_block_runs(page, code):
    exec(compile(code, page, "exec"), {"__name__": "__readme__"})


def test_readme_and_docs_have_python_blocks():
    pages = {page for page, _ in BLOCKS}
    assert "README.md" in pages and any(page.startswith("docs/") for page in pages)


def heading_anchors(page: pathlib.Path) -> set:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces as '-'."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)   # a '#' in a code block is no heading
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_relative_links_resolve(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):          # http(s): and mailto: are not checked (no network in CI)
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest)):
            broken.append(target)
    assert not broken, f"{page}: links to nothing: {broken}"


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
