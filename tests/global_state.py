"""The process-global settings a test can change and forget to restore, watched for the fuzz tests
(issue 48: a fuzz case failed once in a whole-suite run and never alone). conftest's autouse
fixture notes, after every test, which settings it left changed (`note_changes`); a test marked
by fuzz_util.fuzz first checks that every setting is still what the session started with
(`changes_since_start`) and fails naming the test that changed it, instead of fuzzing under a
state no run alone would see. Only what a test could leave behind unnoticed: pytest itself
restores warnings filters, monkeypatch and the environment after each test."""
from __future__ import annotations

import sys

import numpy as np
from hypothesis import settings

import tensorlite as tl

START: dict = {}    # setting -> its value when the session started (torch's when first imported)
LEFT_BY: dict = {}  # setting -> the node id of the last test after which it differed from before it


def snapshot() -> dict:
    """Each watched setting's value now, by the expression that reads it."""
    state = {
        "tl.get_default_dtype()": tl.get_default_dtype(),
        "tl.is_grad_enabled()": tl.is_grad_enabled(),
        "tl.amp.is_autocast_enabled()": tl.amp.is_autocast_enabled(),
        "tl.get_num_threads()": tl.get_num_threads(),  # the cpu backend's pool and its BLAS limit
        "tl.get_printoptions()": tl.get_printoptions(),
        "cpu total_memory()": tl.backend.get_device("cpu").total_memory(),  # check_size's OutOfMemoryError bound
        "np.geterr()": np.geterr(),  # the cpu backend's ops outside quietly() warn, or raise under 'raise'
        "hypothesis settings.default": settings.default,  # the profile every @settings inherits the rest from
    }
    torch = sys.modules.get("torch")  # torch's, once a test imported it (the reference of the comparisons)
    if torch is not None:
        state.update({
            "torch.get_default_dtype()": torch.get_default_dtype(),
            "torch.is_grad_enabled()": torch.is_grad_enabled(),
            "torch.get_num_threads()": torch.get_num_threads(),
            "torch.are_deterministic_algorithms_enabled()": torch.are_deterministic_algorithms_enabled(),
        })
    for key, value in state.items():
        START.setdefault(key, value)
    return state


def note_changes(before: dict, after: dict, nodeid: str) -> None:
    """Remember `nodeid` as the test that changed each setting that differs between its two snapshots."""
    for key, value in after.items():
        if key in before and value != before[key]:
            LEFT_BY[key] = nodeid


def changes_since_start(state: dict) -> list:
    """One line for each setting of `state` that differs from the session's start, naming the test
    that left it so (or saying that none of the tests watched did)."""
    return [f"{key} is {value!r}, not {START[key]!r} as at the start: changed by "
            f"{LEFT_BY.get(key, 'no test the fixture watched (module import time?)')}"
            for key, value in state.items() if value != START[key]]
