"""The hypothesis settings of the fuzz tests (test_fuzz_*.py), chosen so that a failure reproduces.

- TL_FUZZ_SEED unset (the gating CI step, and a plain `pytest`): derandomized, so every run
  draws the same examples (for this hypothesis version and test text) and a failure shows
  again on the rerun.
- TL_FUZZ_SEED=<integer> (CI's wider fuzz step: a new seed each run, printed by the step,
  with TL_FUZZ_EXAMPLES raised): fresh examples drawn from that seed; the same number
  replays the run.
- TL_FUZZ_EXAMPLES=<integer>: the number of examples of every fuzz case, in place of each
  file's own (examples()): CI's wider step raises it, the emulated targets' steps lower it.
- Either way a failure prints the shrunk falsifying example and the `@reproduce_failure(...)`
  line (print_blob) that replays exactly that example. No example database is kept.
- A fuzz test first checks that the process-global settings (default dtype, grad mode, threads,
  numpy's error state, ...: global_state.py) are the session's starting ones, and fails naming
  the earlier test that changed one: a whole-suite run fuzzes the state a run alone does.
"""
import os

from hypothesis import HealthCheck, seed, settings

SEED = os.environ.get("TL_FUZZ_SEED", "").strip()
EXAMPLES = os.environ.get("TL_FUZZ_EXAMPLES", "").strip()


def examples(default: int) -> int:
    """The examples a fuzz case runs: TL_FUZZ_EXAMPLES where set, else the file's `default`."""
    return int(EXAMPLES) if EXAMPLES else default


def fuzz(max_examples: int):
    """The decorator (above @given) that runs a fuzz test with these settings."""
    chosen = settings(max_examples=max_examples, deadline=None, database=None, derandomize=not SEED, print_blob=True,
                      suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

    def decorate(test):
        test = chosen(test)
        test = seed(int(SEED))(test) if SEED else test
        test.needs_default_global_state = True  # conftest's _global_state_watch checks it first
        return test
    return decorate
