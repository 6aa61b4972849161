"""The mutation check's list (backends/rocm/amdemu/mutate.py) against the kernels as they are,
without emulating anything: a kernel edit that removes a mutated line fails here, naming the
mutation, rather than in CI's last step."""
from pathlib import Path

from tensorlite.backends.rocm import compiler
from tensorlite.backends.rocm.amdemu import mutate

ROOT = Path(__file__).resolve().parent.parent


def test_every_mutation_applies_once_and_names_tests_of_the_emulated_suite():
    assert len(mutate.MUTATIONS) >= 10
    assert len({m.name for m in mutate.MUTATIONS}) == len(mutate.MUTATIONS)
    assert mutate.check_mutations(mutate.MUTATIONS, compiler.kernel_dir(), ROOT) == []
    for m in mutate.MUTATIONS:
        assert m.find != m.replace and m.targets and set(m.targets) <= set(mutate.DEFAULT_TARGETS), m.name


def test_a_mutation_whose_text_is_gone_is_named(tmp_path):
    (tmp_path / "unary.hip").write_text("// nothing to mutate\n")
    gone = mutate.Mutation("gone", "unary.hip", "x + 1", "x + 2", ("gfx90a",),
                           ("tests/test_not_in_the_suite.py::test_x",), "a test of the check")
    problems = mutate.check_mutations([gone], tmp_path, ROOT)
    assert problems == ["mutation gone: source text not found in kernels/unary.hip",
                        "mutation gone: tests/test_not_in_the_suite.py::test_x is not in the emulated suite "
                        "(tests/amdemu_suite.txt)"]
