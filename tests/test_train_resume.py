"""examples/train_gpt.py survives SIGKILL: a run killed at a random step, or in the middle of writing a
checkpoint, and rerun with --resume ends with the losses (every step's) and the weights of the run that
was never interrupted, bit for bit on cpu."""
import os
import random
import signal
import subprocess
import sys
import textwrap

import numpy as np

import tensorlite as tl
from test_examples import EXAMPLES, load_example

SCRIPT = os.path.join(EXAMPLES, "train_gpt.py")
ROOT = os.path.dirname(EXAMPLES)
RUN = ["--device", "cpu", "--digits", "2", "--steps", "24", "--batch-size", "32", "--d-model", "16", "--layers", "1",
       "--heads", "2", "--warmup", "5", "--heldout", "20", "--stop-at", "0", "--log-every", "1", "--out", "",
       "--target", "0", "--checkpoint-every", "3"]
# run as train_gpt.py, SIGKILLed on its 4th checkpoint once 1,000 bytes of the file are written
KILL_IN_4TH_SAVE = textwrap.dedent("""
    import os, runpy, signal, sys
    from test_checkpoint_safety import fail_writes_after
    directory = os.path.dirname(os.path.abspath(sys.argv[sys.argv.index("--checkpoint") + 1]))
    fail_writes_after(lambda obj, name, value, raising=True: setattr(obj, name, value), 1000, nth=4,
                      fail=lambda: os.kill(os.getpid(), signal.SIGKILL), directory=directory)
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
""")


def train(checkpoint, *, kill_at_step=None, kill_in_save=False):
    """Run the script (resuming from `checkpoint`); SIGKILL it once it has printed step `kill_at_step`."""
    argv = [SCRIPT, *RUN, "--checkpoint", str(checkpoint), "--resume"]
    cmd = [sys.executable, "-c", KILL_IN_4TH_SAVE, *argv] if kill_in_save else [sys.executable, *argv]
    path = os.pathsep.join([ROOT, os.path.dirname(os.path.abspath(__file__)), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=path)
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in child.stdout:
            lines.append(line)
            if kill_at_step is not None and line.startswith(f"step {kill_at_step:5d} "):
                child.send_signal(signal.SIGKILL)
                break
        child.wait(timeout=300)
    finally:
        child.kill()
    return child.returncode, "".join(lines), child.stderr.read()


def assert_same_run(path, reference):
    got, want = tl.load(path), tl.load(reference)
    assert got["step"] == want["step"] == 24
    assert got["losses"] == want["losses"] and len(got["losses"]) == 24  # every step's loss, as floats
    for k, t in want["model"].items():
        np.testing.assert_array_equal(got["model"][k].numpy(), t.numpy(), err_msg=k)
    for i, s in want["optimizer"]["state"].items():
        for k, t in s.items():  # moments (tensors) and the step count (an int unless capturable)
            g = got["optimizer"]["state"][i][k]
            np.testing.assert_array_equal(*(v.numpy() if isinstance(v, tl.Tensor) else v for v in (g, t)), err_msg=k)


def test_killed_training_resumes_bit_equal(tmp_path):
    reference = tmp_path / "uninterrupted.ckpt"
    gpt = load_example("train_gpt")
    assert gpt.main([*RUN, "--checkpoint", str(reference)]) == 0

    # SIGKILL at a random step (the checkpoint is then up to 2 steps behind), then resume
    path, step = tmp_path / "killed.ckpt", random.randint(4, 20)
    rc, out, err = train(path, kill_at_step=step)
    assert rc == -signal.SIGKILL, (step, err)
    saved = tl.load(path)["step"]  # the kill lands before or after the checkpoint that follows the print
    assert saved in (step // 3 * 3, step // 3 * 3 - 3), (step, saved)
    rc, out, err = train(path)
    assert rc == 0, err
    assert f"resuming from {path} after step {saved}" in out, step
    assert_same_run(path, reference)

    # SIGKILL while the 4th checkpoint (step 12) is being written: the file still holds step 9's, whole
    path = tmp_path / "killed-in-save.ckpt"
    rc, out, err = train(path, kill_in_save=True)
    assert rc == -signal.SIGKILL and "step    12 " in out and "step    13 " not in out, err
    assert tl.load(path)["step"] == 9
    rc, out, err = train(path)
    assert rc == 0 and "after step 9" in out, err
    assert_same_run(path, reference)
