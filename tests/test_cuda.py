"""The CUDA path (run where a GPU is: `python3 -m pytest -q tests/test_cuda.py`; skipped elsewhere): the candidate
logits by the full product, a training run with batches built ahead and pinned, fused AdamW and TF32, and the
compiled batch loss against the eager one (in a child process: on an H200 with torch 2.11 it crashed the process,
docs/benchmarks.md "Compiled training")."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from pinyin_hanzi.config import load_config
from pinyin_hanzi.models.candidate_logits import candidate_logits
from pinyin_hanzi.training.recipe import train

from conftest import ROOT, tiny_config_dict, write_config

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_candidate_logits_on_a_gpu_equal_the_cpus():
    torch.manual_seed(0)
    hidden, weight = torch.randn(4, 300, 32), torch.randn(500, 32)
    candidates = torch.randint(0, 500, (4, 300, 40))
    on_cpu = candidate_logits(hidden, weight, candidates)
    on_gpu = candidate_logits(hidden.cuda(), weight.cuda(), candidates.cuda()).cpu()
    torch.testing.assert_close(on_gpu, on_cpu, rtol=1e-3, atol=1e-3)  # (TF32 products on the GPU)


def test_a_tiny_run_trains_on_the_gpu_with_prefetched_batches(tmp_path, tiny_corpus):
    config = tiny_config_dict(tmp_path, tiny_corpus, max_steps=60, eval_every=60, batch_tokens=160)
    config["train"].update(device="cuda", prefetch=-1)  # -1: four batches ahead, pinned, on a GPU
    messages = []
    train(load_config(write_config(tmp_path / "c.yaml", config)), log=messages.append)
    records = [json.loads(line) for line in (tmp_path / "runs" / "tiny" / "train_log.jsonl").read_text().splitlines()]
    assert len(records) == 60 and records[-1]["loss"] < records[0]["loss"]
    assert any("char accuracy" in m for m in messages)


def test_the_compiled_batch_loss_equals_the_eager_one():
    script = textwrap.dedent("""
        import torch
        from pinyin_hanzi.config import ModelConfig
        from pinyin_hanzi.data.batches import Batch
        from pinyin_hanzi.models.transformer import Transformer
        from pinyin_hanzi.training.speed import BatchLoss
        torch.manual_seed(0)
        config = ModelConfig(d_model=64, n_heads=2, n_encoder_layers=2, n_decoder_layers=1, d_ff=128, dropout=0.0)
        model = Transformer(config, source_vocab_size=50, target_vocab_size=80).cuda()
        ids = torch.randint(4, 80, (50, 6), device="cuda")
        candidates = (ids, torch.ones_like(ids, dtype=torch.bool))
        eager = BatchLoss(model, 0.1, candidates, device=torch.device("cuda"))
        compiled = BatchLoss(model, 0.1, candidates, mode="reduce-overhead", device=torch.device("cuda"))
        for length in (5, 9, 5):
            batch = Batch(torch.randint(4, 50, (16, length)).cuda(), torch.randint(4, 80, (16, length)).cuda())
            expected = eager(batch, False)
            got = compiled(batch, False)
            got.backward()
            assert abs(float(got) - float(expected)) <= 1e-3 * abs(float(expected)), (float(got), float(expected))
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


STATIC_SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from torch._dynamo.utils import counters
    from pinyin_hanzi.config import ModelConfig
    from pinyin_hanzi.data.batches import Batch
    from pinyin_hanzi.data.vocab import PAD_ID
    from pinyin_hanzi.models.transformer import Transformer
    from pinyin_hanzi.training.speed import BatchLoss, compile_mode
    device = torch.device(sys.argv[1])
    torch.manual_seed(0)
    config = ModelConfig(d_model=64, n_heads=2, n_encoder_layers=2, n_decoder_layers=1, d_ff=128, dropout=0.0)
    model = Transformer(config, source_vocab_size=50, target_vocab_size=80).to(device)
    ids = torch.randint(4, 80, (50, 6), device=device)
    candidates = (ids, torch.ones_like(ids, dtype=torch.bool))
    eager = BatchLoss(model, 0.1, candidates, device=device)
    compiled = BatchLoss(model, 0.1, candidates, mode=compile_mode("on", device), device=device, buckets=2)
    for rows, width, real in ((16, 8, 8), (8, 16, 11), (16, 8, 5), (8, 16, 16), (16, 8, 8)):
        source, target = torch.randint(4, 50, (rows, width)), torch.randint(4, 80, (rows, width))
        source[1:, real:] = target[1:, real:] = PAD_ID  # padded to its bucket's width, as length buckets are
        batch = Batch(source.to(device), target.to(device))
        expected = eager(batch, True)
        got = compiled(batch, real < width)
        got.backward()
        got, expected = float(got.detach()), float(expected)
        assert abs(got - expected) <= 1e-3 * abs(expected), (got, expected)
    assert counters["stats"]["unique_graphs"] <= 2, dict(counters["stats"])  # one graph a bucket
    print("ok")
""")


def test_the_compiled_batch_loss_with_length_buckets_compiles_once_a_bucket():
    result = subprocess.run([sys.executable, "-c", STATIC_SCRIPT, "cuda"], cwd=ROOT, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]
