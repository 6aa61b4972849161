"""CosineSimilarity and PairwiseDistance, as torch.nn.modules.distance."""
from __future__ import annotations

from .utils import function_module

CosineSimilarity = function_module(__name__, "CosineSimilarity", "cosine_similarity",
                                   "x1 . x2 / (max(|x1|, eps) max(|x2|, eps)) along dim", dim=1, eps=1e-8,
                                   extra_repr=lambda self: "")  # as torch's repr


PairwiseDistance = function_module(__name__, "PairwiseDistance", "pairwise_distance",
                                   "||x1 - x2 + eps||_p over the last dim", p=2.0, eps=1e-6, keepdim=False,
                                   extra_repr=lambda self: "")  # as torch's repr
