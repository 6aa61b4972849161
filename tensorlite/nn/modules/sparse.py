"""Embedding, as torch.nn.modules.sparse."""
from __future__ import annotations

from ...autograd import no_grad
from ...errors import ShapeError, describe
from ...ops.creation import empty
from ...tensor import Tensor
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module


class Embedding(Module):
    """Lookup table initialised N(0, 1) (the padding_idx row zeroed), as torch.nn.Embedding."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None, device=None, dtype=None,
                 _weight=None, _freeze=False):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = None if padding_idx is None else padding_idx % num_embeddings
        if _weight is not None:  # from_pretrained's (torch's keywords): the weight as given
            self.weight = Parameter(_weight.detach(), requires_grad=not _freeze)
            return
        self.weight = Parameter(empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx] = 0.0

    @classmethod
    def from_pretrained(cls, embeddings, freeze: bool = True, padding_idx=None):
        """An Embedding whose weight is `embeddings` (2-d: num_embeddings x embedding_dim), trained
        unless freeze, as torch.nn.Embedding.from_pretrained (the padding row is left as given).

        >>> import tensorlite as tl
        >>> e = tl.nn.Embedding.from_pretrained(tl.tensor([[1.0, 2.0], [3.0, 4.0]]))
        >>> e(tl.tensor([1])).tolist(), e.weight.requires_grad
        ([[3.0, 4.0]], False)
        """
        if not isinstance(embeddings, Tensor) or embeddings.ndim != 2:
            raise ShapeError(f"{describe('Embedding.from_pretrained', embeddings=embeddings)}: embeddings must "
                             "be a 2-dimensional tensor")
        n, d = embeddings.shape
        return cls(n, d, padding_idx=padding_idx, _weight=embeddings, _freeze=freeze)

    def forward(self, ids):
        """The rows of weight at ids (an integer tensor of any shape), as F.embedding."""
        return F.embedding(ids, self.weight, self.padding_idx)

    def extra_repr(self):
        """num_embeddings, embedding_dim and padding_idx, for the repr."""
        return f"{self.num_embeddings}, {self.embedding_dim}" + (
            f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")
