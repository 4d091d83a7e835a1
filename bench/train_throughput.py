"""Training throughput: our Transformer vs a stock torch.nn.Transformer of the same size, side by side.

Both train on the same token-budget batches of the prepared training split, alternating round by round
so that machine noise hits both alike; each reports target tokens/s (median over rounds). The machine's
fp32 matmul peak is measured in the same run, and achieved FLOP/s are given as a fraction of it.

    python bench/train_throughput.py --config configs/quickstart.yaml [--rounds 5 --steps 10 --device cpu]
    python bench/train_throughput.py train.loss=full            # config overrides work as in train.py
    python bench/train_throughput.py --threads 1                # fix the thread count (0: one per core)

With train.loss=candidates our FLOPs count the candidates' logits only, not the full output layer.

The last line printed is a one-line JSON summary.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pinyin_hanzi.config import load_config
from pinyin_hanzi.corpus import prepare, read_examples
from pinyin_hanzi.data import BatchStream, encode_examples
from pinyin_hanzi.decoding import CandidateTable
from pinyin_hanzi.model import Transformer, shift_right, sinusoidal_table
from pinyin_hanzi.training import autocast_for, loss_fn, model_loss, select_device
from pinyin_hanzi.visualize import flops_per_token
from pinyin_hanzi.vocab import PAD_ID, load_vocab


class Reference(nn.Module):
    """The stock baseline: nn.Embedding x sqrt(d) + sinusoidal PE, torch.nn.Transformer, Linear output."""

    def __init__(self, config, source_vocab: int, target_vocab: int):
        super().__init__()
        d = config.d_model
        self.source, self.target = nn.Embedding(source_vocab, d), nn.Embedding(target_vocab, d)
        self.register_buffer("pe", sinusoidal_table(config.max_positions, d), persistent=False)
        self.transformer = nn.Transformer(d_model=d, nhead=config.n_heads, num_encoder_layers=config.n_encoder_layers,
                                          num_decoder_layers=config.n_decoder_layers, dim_feedforward=config.d_ff,
                                          dropout=config.dropout, batch_first=True, norm_first=config.norm == "pre")
        self.output = nn.Linear(d, target_vocab)
        self.scale = math.sqrt(d)

    def forward(self, source, target):
        decoder_input = shift_right(target)
        s, t = source.shape[1], target.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(t, device=source.device)
        hidden = self.transformer(self.source(source) * self.scale + self.pe[:s],
                                  self.target(decoder_input) * self.scale + self.pe[:t],
                                  tgt_mask=causal, src_key_padding_mask=source == PAD_ID,
                                  tgt_key_padding_mask=decoder_input == PAD_ID, memory_key_padding_mask=source == PAD_ID)
        return self.output(hidden)


def matmul_peak(device: torch.device, size: int = 2048, repeats: int = 5) -> float:
    """Median fp32 FLOP/s of a (size x size) @ (size x size) product on this device."""
    a, b = torch.randn(size, size, device=device), torch.randn(size, size, device=device)
    times = []
    for _ in range(repeats + 1):
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        a @ b
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return 2 * size**3 / statistics.median(times[1:])


def run_steps(model, optimizer, batches, device, loss) -> tuple[int, float]:
    """Train on ``batches``; returns (target tokens, seconds)."""
    tokens = 0
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for batch in batches:
        model.train()
        with autocast_for(device):
            value, n_tokens = loss(model, batch)
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        tokens += n_tokens
    if device.type == "cuda":
        torch.cuda.synchronize()
    return tokens, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/quickstart.yaml")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="steps per model per round")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default, one per core)")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides, e.g. train.loss=full")
    args = parser.parse_args()
    config = load_config(args.config, args.overrides)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = select_device(args.device)
    data_dir = prepare(config.data)
    pinyin_vocab, hanzi_vocab = load_vocab(data_dir / "pinyin_vocab.txt"), load_vocab(data_dir / "hanzi_vocab.txt")
    encoded = encode_examples(read_examples(data_dir / "train.tsv", trusted=True), pinyin_vocab, hanzi_vocab)
    candidates = tuple(part.to(device) for part in CandidateTable(hanzi_vocab).for_vocab(pinyin_vocab))
    stream = iter(BatchStream(encoded, config.train.batch_tokens, seed=0))
    torch.manual_seed(0)
    ours = Transformer(config.model, source_vocab_size=len(pinyin_vocab), target_vocab_size=len(hanzi_vocab)).to(device)
    reference = Reference(config.model, len(pinyin_vocab), len(hanzi_vocab)).to(device)
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-4) for name, model in
                  (("ours", ours), ("reference", reference))}
    ours_step = torch.compile(ours) if config.train.compile else ours  # train.compile=true, as train.py does
    use_candidates = config.train.loss == "candidates"
    ours_loss = lambda model, batch: model_loss(model, batch, config.train.label_smoothing,
                                                candidates if use_candidates else None)  # as train_step
    reference_loss = lambda model, batch: loss_fn(model(batch.source, batch.target), batch.target,
                                                  config.train.label_smoothing)
    peak = matmul_peak(device)
    rates: dict[str, list[float]] = {"ours": [], "reference": []}
    lengths, candidate_counts = [], []  # mean target length and characters in the candidate softmax, per batch
    for round_index in range(args.rounds + 1):  # round 0 warms up both and is not counted
        batches = []
        for _ in range(args.steps):
            batch = next(stream).to(device)
            batches.append(batch)
            real = batch.target != PAD_ID
            lengths.append(float(real.sum(1).float().mean()))
            candidate_counts.append(1 + float(candidates[1][batch.source].sum(-1)[real].float().mean()))
        for name, model, loss in (("ours", ours_step, ours_loss), ("reference", reference, reference_loss)):
            tokens, seconds = run_steps(model, optimizers[name], batches, device, loss)
            if round_index:
                rates[name].append(tokens / seconds)
        if round_index:
            print(f"round {round_index}: ours {rates['ours'][-1]:,.0f} tok/s, "
                  f"reference {rates['reference'][-1]:,.0f} tok/s", flush=True)
    ours_rate, reference_rate = statistics.median(rates["ours"]), statistics.median(rates["reference"])
    flops = flops_per_token(ours, statistics.mean(lengths))
    training_flops = flops["training"]
    if use_candidates:  # the output layer computes the candidates' logits only (Transformer.logits)
        training_flops += 3 * (2 * config.model.d_model * statistics.mean(candidate_counts) - flops["output"])
    summary = {
        "benchmark": "train_throughput", "device": str(device), "threads": torch.get_num_threads(),
        "config": args.config, "d_model": config.model.d_model, "layers": [config.model.n_encoder_layers,
                                                                              config.model.n_decoder_layers],
        "loss": config.train.loss, "compile": config.train.compile, "batch_tokens": config.train.batch_tokens, "rounds": args.rounds,
        "steps_per_round": args.steps, "ours_tokens_per_s": round(ours_rate), "reference_tokens_per_s": round(reference_rate),
        "ratio": round(ours_rate / reference_rate, 3), "matmul_peak_gflops": round(peak / 1e9, 1),
        "ours_training_mflops_per_token": round(training_flops / 1e6, 2),
        "reference_training_mflops_per_token": round(flops["training"] / 1e6, 2),
        "ours_achieved_gflops": round(ours_rate * training_flops / 1e9, 1),
        "ours_fraction_of_peak": round(ours_rate * training_flops / peak, 3),
    }
    print(f"ours {ours_rate:,.0f} tok/s vs reference {reference_rate:,.0f} tok/s: ratio {summary['ratio']}; "
          f"ours at {summary['ours_achieved_gflops']} GFLOP/s = {summary['ours_fraction_of_peak']:.0%} of the "
          f"{summary['matmul_peak_gflops']} GFLOP/s matmul peak")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
