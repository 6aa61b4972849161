"""SummaryWriter, as torch.utils.tensorboard's: TensorBoard event files of scalars, histograms and
text, written through the `tensorboard` package (an optional dependency: `pip install tensorboard`),
so `tensorboard --logdir runs` shows them. As in torch:

    from tensorlite.utils.tensorboard import SummaryWriter
    with SummaryWriter() as writer:                    # runs/<date>_<host>
        writer.add_scalar("loss", loss.item(), step)
        writer.add_histogram("fc.weight", model.fc.weight, step)
        writer.add_text("notes", "a *markdown* note", step)
"""
from __future__ import annotations

import os
import socket
import time
from datetime import datetime

import numpy as np

from ..errors import ArgumentError, BackendUnavailable
from ..tensor import Tensor

try:
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.compat.proto.event_pb2 import Event, SessionLog
    from tensorboard.compat.proto.tensor_pb2 import TensorProto
    from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
    from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData
    from tensorboard.summary.writer.event_file_writer import EventFileWriter
except ImportError:  # optional: SummaryWriter() then says how to get it
    EventFileWriter = None


def _tensorflow_bins() -> np.ndarray:
    """TensorFlow's default histogram bucket edges (torch's bins='tensorflow'): +-1e-12 * 1.1^k up to
    1e20, and 0: fine near zero, coarse far from it, the same for every call."""
    pos = 1e-12 * 1.1 ** np.arange(int(np.ceil(np.log(1e32) / np.log(1.1))))
    return np.concatenate([-pos[::-1], [0.0], pos])


def _as_numpy(values) -> np.ndarray:
    if isinstance(values, Tensor):
        values = values.detach().cpu().numpy()
    return np.asarray(values, dtype=np.float64).reshape(-1)


def _scalar(value) -> float:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ArgumentError(f"add_scalar: a scalar needs a one-element tensor, got shape {tuple(value.shape)}")
        return float(value.item())
    return float(value)


class SummaryWriter:
    """Writes event files to `log_dir` (default runs/<date>_<host><comment>) as torch's SummaryWriter."""

    def __init__(self, log_dir=None, comment: str = "", purge_step=None, max_queue: int = 10, flush_secs: int = 120,
                 filename_suffix: str = ""):
        if EventFileWriter is None:
            raise BackendUnavailable("SummaryWriter needs the tensorboard package (pip install tensorboard)")
        if log_dir is None:
            log_dir = os.path.join("runs", datetime.now().strftime("%b%d_%H-%M-%S") + "_" + socket.gethostname()
                                   + comment)
        self.log_dir = str(log_dir)
        self._writer = EventFileWriter(self.log_dir, max_queue, flush_secs, filename_suffix)
        self._runs = {}  # add_scalars' writers, one per curve: {directory: EventFileWriter}
        if purge_step is not None:  # a restart: TensorBoard drops an earlier run's events from this step on
            self._add(self._writer, Event(step=int(purge_step), file_version="brain.Event:2"), None)
            self._add(self._writer, Event(step=int(purge_step), session_log=SessionLog(status=SessionLog.START)), None)

    def get_logdir(self) -> str:
        return self.log_dir

    @staticmethod
    def _add(writer, event, walltime):
        event.wall_time = time.time() if walltime is None else float(walltime)
        writer.add_event(event)

    def _summary(self, value, global_step, walltime, writer=None):
        event = Event(summary=summary_pb2.Summary(value=[value]))
        if global_step is not None:
            event.step = int(global_step)
        self._add(writer or self._writer, event, walltime)

    def add_scalar(self, tag: str, scalar_value, global_step=None, walltime=None, new_style: bool = False,
                   double_precision: bool = False):
        """One point of the curve `tag` (a number or a one-element tensor)."""
        value = _scalar(scalar_value)
        if new_style:  # a tensor summary of the scalars plugin, as torch's new_style=True
            proto = TensorProto(dtype="DT_DOUBLE" if double_precision else "DT_FLOAT", tensor_shape=TensorShapeProto())
            (proto.double_val if double_precision else proto.float_val).append(value)
            plugin = summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
            meta = summary_pb2.SummaryMetadata(plugin_data=plugin)
            self._summary(summary_pb2.Summary.Value(tag=tag, tensor=proto, metadata=meta), global_step, walltime)
        else:
            self._summary(summary_pb2.Summary.Value(tag=tag, simple_value=value), global_step, walltime)

    def add_scalars(self, main_tag: str, tag_scalar_dict: dict, global_step=None, walltime=None):
        """Several curves in one chart: each written to its own run directory, log_dir/main_tag_key,
        as torch's (TensorBoard shows them together)."""
        for key, value in tag_scalar_dict.items():
            run = os.path.join(self.log_dir, f"{main_tag.replace('/', '_')}_{key}")
            if run not in self._runs:
                self._runs[run] = EventFileWriter(run)
            self._summary(summary_pb2.Summary.Value(tag=main_tag, simple_value=_scalar(value)), global_step, walltime,
                          self._runs[run])

    def add_histogram(self, tag: str, values, global_step=None, bins="tensorflow", walltime=None, max_bins=None):
        """The distribution of `values` (a tensor or an array): torch's 'tensorflow' buckets by default, or
        any bins numpy.histogram takes. Empty buckets at either end are left out, as torch does."""
        x = _as_numpy(values)
        if x.size == 0:
            raise ArgumentError(f"add_histogram: {tag!r} has no values")
        if not np.isfinite(x).all():
            raise ArgumentError(f"add_histogram: {tag!r} has nan or inf values")
        counts, edges = np.histogram(x, bins=_tensorflow_bins() if bins == "tensorflow" else bins)
        used = np.flatnonzero(counts)
        first, last = used[0], used[-1]
        # bucket i counts the values up to bucket_limit[i]: an empty bucket ending where the data begins,
        # then the data's buckets, as torch writes them
        proto = summary_pb2.HistogramProto(min=float(x.min()), max=float(x.max()), num=int(x.size),
                                           sum=float(x.sum()), sum_squares=float(x @ x),
                                           bucket_limit=edges[first:last + 2].tolist(),
                                           bucket=[0.0] + counts[first:last + 1].astype(np.float64).tolist())
        self._summary(summary_pb2.Summary.Value(tag=tag, histo=proto), global_step, walltime)

    def add_text(self, tag: str, text_string: str, global_step=None, walltime=None):
        """Markdown text, shown by TensorBoard's text plugin (tag/text_summary, as torch writes it)."""
        meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name="text", content=TextPluginData(version=0).SerializeToString()))
        proto = TensorProto(dtype="DT_STRING", string_val=[str(text_string).encode("utf-8")],
                            tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        self._summary(summary_pb2.Summary.Value(tag=f"{tag}/text_summary", metadata=meta, tensor=proto),
                      global_step, walltime)

    def flush(self):
        for writer in (self._writer, *self._runs.values()):
            writer.flush()

    def close(self):
        for writer in (self._writer, *self._runs.values()):
            writer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
