"""Checkpoints survive a crash: tl.save (and save_safetensors) to a path replace the file only once the new
one is complete, so a save that fails (an exception, a full disk) or is killed (SIGKILL) midway leaves the
previous checkpoint loadable and equal; a truncated or corrupted file raises FormatError naming it; files
of the previous format (no checksums) still load."""
import base64
import io
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tensorlite as tl
from tensorlite.io import load_safetensors, save_safetensors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def checkpoint(step: int, n: int = 4, size: int = 1000) -> dict:
    """A state dict whose every value says which step wrote it."""
    return {"model": {f"w{i}": tl.full((size,), float(step * 100 + i)) for i in range(n)},
            "ids": tl.arange(5) + step, "half": tl.full((3,), step + 0.5, dtype=tl.bfloat16), "step": step}


def assert_is_checkpoint(got: dict, step: int, n: int = 4, size: int = 1000):
    want = checkpoint(step, n, size)
    assert got["step"] == step and set(got["model"]) == set(want["model"])
    for k, t in [*want["model"].items(), ("ids", want["ids"]), ("half", want["half"])]:
        g = got["model"][k] if k in want["model"] else got[k]
        assert g.dtype == t.dtype and g.shape == t.shape, k
        np.testing.assert_array_equal(g.numpy(), t.numpy(), err_msg=k)


def temp_files(directory) -> list:
    return [p for p in os.listdir(directory) if p.endswith(".tmp")]


def run_child(code: str, *args, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


class FailingFile:
    """A binary file that, once `limit` bytes are written, writes no more and calls `fail` (default: raises
    ENOSPC, as a full disk does)."""

    def __init__(self, f, limit, fail=None):
        self.f, self.left, self.fail = f, limit, fail

    def write(self, b):
        b = memoryview(b).cast("B")
        if len(b) > self.left:
            self.f.write(b[:self.left])
            self.f.flush()
            self.left = 0
            if self.fail is not None:
                self.fail()
            raise OSError(28, "No space left on device (injected)")
        self.left -= len(b)
        return self.f.write(b)

    def __getattr__(self, name):
        return getattr(self.f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def fail_writes_after(setattr_, limit, fail=None, nth=1, directory=None):
    """From the nth on, the files tensorlite.io opens for writing (through open() or os.fdopen(), whichever
    it uses; in `directory` where given) are FailingFiles. setattr_: monkeypatch.setattr, or setattr."""
    import tensorlite.io as tio
    real_open, real_fdopen, opened = open, os.fdopen, []

    def watch(f, path, mode):
        if "w" in mode and (directory is None or os.path.dirname(os.path.abspath(path)) == directory):
            opened.append(path)
            return FailingFile(f, limit, fail) if len(opened) >= nth else f
        return f
    setattr_(tio, "open", lambda file, mode="r", *a, **k: watch(real_open(file, mode, *a, **k), file, mode),
             raising=False)
    setattr_(tio.os, "fdopen", lambda fd, mode="r", *a, **k: watch(real_fdopen(fd, mode, *a, **k),
                                                                   os.readlink(f"/proc/self/fd/{fd}"), mode))


def fail_third_host_copy(setattr_, _):
    """The host copy of the third tensor fails (a device lost): after the header and two tensors are written."""
    real, calls = tl.Tensor.numpy, []

    def failing(t):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("injected: the device was lost")
        return real(t)
    setattr_(tl.Tensor, "numpy", failing)


@pytest.mark.parametrize("failure,limit", [(fail_writes_after, 0), (fail_writes_after, 100),
                                           (fail_writes_after, 3000), (fail_third_host_copy, None)],
                         ids=["write-0", "write-100", "write-3000", "host-copy"])
@pytest.mark.parametrize("writer", ["save", "save_safetensors"])
def test_an_error_midway_leaves_the_previous_file(tmp_path, monkeypatch, writer, failure, limit):
    path = tmp_path / "ckpt.pt"
    if writer == "save":
        def save(step):
            tl.save(checkpoint(step), path)

        def check(step):
            assert_is_checkpoint(tl.load(path), step)
    else:
        def save(step):
            save_safetensors(checkpoint(step)["model"], path, metadata={"step": str(step)})

        def check(step):
            got = load_safetensors(path)
            assert set(got) == {f"w{i}" for i in range(4)}
            np.testing.assert_array_equal(got["w3"].numpy(), checkpoint(step)["model"]["w3"].numpy())
    save(1)
    os.chmod(path, 0o640)
    with monkeypatch.context() as m:
        failure(m.setattr, limit)
        with pytest.raises(OSError, match="injected"):
            save(2)
    check(1)
    assert temp_files(tmp_path) == [], "the failed save left its temporary file"
    save(3)
    check(3)
    assert os.stat(path).st_mode & 0o777 == 0o640, "the new file lost the old one's permissions"
    assert temp_files(tmp_path) == []


def test_a_full_disk_midway_leaves_the_previous_file(tmp_path):
    """A real write error after N bytes: the child's file-size limit (RLIMIT_FSIZE) makes write() fail
    with EFBIG once a file would grow past N bytes, as a full disk fails it with ENOSPC."""
    path = tmp_path / "ckpt.pt"
    child = run_child("""
        import os, resource, signal, sys
        import tensorlite as tl
        from test_checkpoint_safety import checkpoint, assert_is_checkpoint, temp_files
        from tensorlite.io import load_safetensors, save_safetensors
        path, plain = sys.argv[1], sys.argv[1] + ".safetensors"
        tl.save(checkpoint(1, n=8), path)
        save_safetensors(checkpoint(1, n=8)["model"], plain)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failing write(), not a signal
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        for cut in (lambda size: 0, lambda size: 100, lambda size: size // 2, lambda size: size - 1):
            for save, p in ((tl.save, path), (save_safetensors, plain)):
                limit = cut(os.path.getsize(p))
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
                try:
                    save(checkpoint(2, n=8) if save is tl.save else checkpoint(2, n=8)["model"], p)
                except Exception as e:  # OSError from tl.save; the safetensors library's own from its writer
                    print(save.__name__, limit, type(e).__name__, e)
                else:
                    raise AssertionError(f"{save.__name__} of a {os.path.getsize(p)}-byte file passed a "
                                         f"{limit}-byte limit")
                resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
            assert_is_checkpoint(tl.load(path), 1, n=8)
            assert load_safetensors(plain)["w7"].tolist()[0] == 107
            assert temp_files(os.path.dirname(path)) == [], limit
    """, path, cwd=os.path.dirname(os.path.abspath(__file__)))
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err
    assert len(out.split("\n")) == 9, out


def test_sigkill_while_saving_leaves_a_whole_checkpoint(tmp_path):
    """A child saves a 64 MB checkpoint over and over to one path; from its third save on, it is SIGKILLed
    the moment a file in the directory is seen part-written: the path holds the last complete save."""
    path = tmp_path / "big.pt"
    child = run_child("""
        import sys
        import tensorlite as tl
        from test_checkpoint_safety import checkpoint
        for step in range(1, 100):
            sd = checkpoint(step, n=16, size=2**20)  # 16 x 4 MB
            print("begin", step, flush=True)
            tl.save(sd, sys.argv[1])
            print("end", step, flush=True)
    """, path, cwd=os.path.dirname(os.path.abspath(__file__)))
    try:
        while child.stdout.readline().strip() != "begin 3":
            assert child.poll() is None, child.stderr.read()
        full, deadline = os.path.getsize(path), time.monotonic() + 60
        while time.monotonic() < deadline and child.poll() is None:
            sizes = []
            for name in os.listdir(tmp_path):
                try:
                    sizes.append(os.path.getsize(tmp_path / name))
                except FileNotFoundError:  # renamed in between
                    pass
            if any(0 < s < full for s in sizes):
                break
        child.send_signal(signal.SIGKILL)
        printed = child.stdout.read().split()
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL, child.stderr.read()
    done = max(int(v) for k, v in zip(printed, printed[1:]) if k == "end") if "end" in printed else 2
    assert sizes and any(0 < s < full for s in sizes), f"no file was seen part-written: {sizes}, {full}"
    assert_is_checkpoint(tl.load(path), done, n=16, size=2**20)


def saved_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    tl.save(checkpoint(7, n=2, size=16), path)
    return path, path.read_bytes()


def test_a_truncated_file_raises_format_error_naming_it(tmp_path):
    path, data = saved_file(tmp_path)
    n = int.from_bytes(data[:8], "little")
    for length in sorted({0, 5, 8, 8 + n // 2, 8 + n, 8 + n + 7, len(data) - 1}):
        path.write_bytes(data[:length])
        with pytest.raises(tl.FormatError, match=f"{path}.*(truncated|not a tl.save)"):
            tl.load(path)


def test_every_flipped_byte_raises_format_error_naming_it(tmp_path):
    path, data = saved_file(tmp_path)
    for i in range(len(data)):  # one bit of every byte: header, padding and tensor data
        path.write_bytes(data[:i] + bytes([data[i] ^ 0x04]) + data[i + 1:])
        with pytest.raises(tl.FormatError, match=str(path)):
            tl.load(path)
    with pytest.raises(tl.FormatError, match=r"corrupted: the bytes of obj\['half'\]"):
        tl.load(io.BytesIO(data[:-1] + bytes([data[-1] ^ 1])))


# written by tl.save before checksums (format 1, main 9aafb57):
# {'w': [[1.5, -2.0]] f32, 'h': [0.5, 3.0] bf16, 'ids': [7, 8] i64, 'step': 3, 'name': 'run'}
FORMAT_1 = (
    "uAEAAAAAAAB7Il9fbWV0YWRhdGFfXyI6IHsidGVuc29ybGl0ZS5zYXZlIjogIntcImRpY3RcIjogW1tcIndcIiwge1widGVuc29yXCI6IF"
    "wiMFwiLCBcImRldmljZVwiOiBcImNwdVwifV0sIFtcImhcIiwge1widGVuc29yXCI6IFwiMVwiLCBcImRldmljZVwiOiBcImNwdVwifV0s"
    "IFtcImlkc1wiLCB7XCJ0ZW5zb3JcIjogXCIyXCIsIFwiZGV2aWNlXCI6IFwiY3B1XCJ9XSwgW1wic3RlcFwiLCAzXSwgW1wibmFtZVwiLC"
    "BcInJ1blwiXV19In0sICIwIjogeyJkdHlwZSI6ICJGMzIiLCAic2hhcGUiOiBbMSwgMl0sICJkYXRhX29mZnNldHMiOiBbMCwgOF19LCAi"
    "MSI6IHsiZHR5cGUiOiAiQkYxNiIsICJzaGFwZSI6IFsyXSwgImRhdGFfb2Zmc2V0cyI6IFs4LCAxMl19LCAiMiI6IHsiZHR5cGUiOiAiST"
    "Y0IiwgInNoYXBlIjogWzJdLCAiZGF0YV9vZmZzZXRzIjogWzEyLCAyOF19fSAgICAgIAAAwD8AAADAAD9AQAcAAAAAAAAACAAAAAAAAAA=")


def test_files_of_the_previous_format_load(tmp_path):
    got = tl.load(io.BytesIO(base64.b64decode(FORMAT_1)))
    assert got["w"].tolist() == [[1.5, -2.0]] and got["w"].dtype == tl.float32
    assert got["h"].dtype == tl.bfloat16 and got["h"].float().tolist() == [0.5, 3.0]
    assert got["ids"].tolist() == [7, 8] and (got["step"], got["name"]) == (3, "run")
    path = tmp_path / "old.pt"
    path.write_bytes(base64.b64decode(FORMAT_1)[:-3])
    with pytest.raises(tl.FormatError, match="truncated"):
        tl.load(path)


def test_file_objects_seekable_or_not_round_trip():
    class Pipe:  # write() only, as a socket or a pipe: no seeking back to patch the header
        def __init__(self):
            self.chunks = []

        def write(self, b):
            self.chunks.append(bytes(b))
            return len(b)
    pipe, buf = Pipe(), io.BytesIO(b"prefix")
    buf.seek(0, io.SEEK_END)
    tl.save(checkpoint(4), pipe)
    tl.save(checkpoint(4), buf)
    assert b"".join(pipe.chunks) == buf.getvalue()[len(b"prefix"):]
    assert_is_checkpoint(tl.load(io.BytesIO(b"".join(pipe.chunks))), 4)
