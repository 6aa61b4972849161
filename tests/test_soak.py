"""A short soak with faults injected (issue 48; benchmarks/soak.py runs the long one): every fault
raises a tensorlite error, and the loss curve equals the fault-free run's (on a real GPU within the
run-to-run spread of float atomics: soak.same_curve): a fault leaves nothing behind in the model,
the optimizer or the generators."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import soak  # noqa: E402


def test_faults_raise_and_leave_the_loss_curve_as_it_was(device):
    emulated = device == "amdemu"  # every kernel interpreted: soak.SMALL, each fault once (~30 s of CPU)
    kw = dict(device=device, log=None, **(dict(steps=12, every=2, **soak.SMALL) if emulated else
                                          dict(steps=25, every=5, d_model=32, layers=1)))
    clean, none, _, _ = soak.run(faults=False, **kw)
    losses, raised, warm, end = soak.run(**kw)
    assert none == {} and set(raised) == set(soak.FAULTS)
    assert raised["allocation"] == "OutOfMemoryError" and raised["index"] == "IndexOutOfRange"
    assert soak.same_curve(losses, clean, device) and all(np.isfinite(losses))
    # learning shows over 25 steps; 12 steps of random tokens are within their batches' noise
    assert emulated or losses[-1] < losses[0]
