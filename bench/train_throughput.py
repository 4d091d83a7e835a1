"""Training throughput: our Transformer vs a stock torch.nn.Transformer of the same size, side by side.

Both train on the same token-budget batches, alternating round by round so that machine noise hits both
alike; each reports target tokens/s (median over rounds). The machine's fp32 and bf16 matmul peaks are
measured in the same run, and our achieved FLOP/s are given as a fraction of the peak of the precision we
train in.

The batches come from a synthetic corpus by default, so the benchmark runs out of the box, offline: the
vocabularies of the shipped model (pinyin_hanzi/pretrained/model.pt), characters drawn by Zipf's law over
its hanzi vocabulary (which lists them most frequent first), clauses cut after clause punctuation as the
corpus reader cuts them (about 7 characters on average), each character read as pypinyin reads it alone.
Its tokens/s are comparable with one another, not with those of a real corpus. ``--data prepared`` uses the config's prepared training split
instead (prepared as train.py does, downloading its sources once).

    python bench/train_throughput.py [--config configs/quickstart.yaml --rounds 5 --steps 10 --device cpu]
    python bench/train_throughput.py --data prepared            # the config's training split
    python bench/train_throughput.py train.loss=full            # config overrides work as in train.py
    python bench/train_throughput.py train.precision=fp32       # ours in fp32 (default: the config's, auto)
    python bench/train_throughput.py --reference-precision fp32,bf16   # the reference in each, same run
    python bench/train_throughput.py --threads 1                # fix the thread count (0: one per core)
    python bench/train_throughput.py data.abbreviate=0.5        # half the examples typed with prefix tokens

Ours trains in train.precision as train.py does (auto: bf16 autocast on CPUs with native bf16 matrix
units, fp32 elsewhere, GPUs included). The reference trains in fp32 unless --reference-precision says
otherwise; ``--reference-precision fp32,bf16`` measures both beside ours.

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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pinyin_hanzi.checkpoint import HANZI_VOCAB_KEY, PINYIN_VOCAB_KEY, load_checkpoint
from pinyin_hanzi.cli import check_bounds, max_threads
from pinyin_hanzi.config import DataConfig, load_config
from pinyin_hanzi.data.batches import BatchStream, bucket_count, encode_split, hanzi_ids, prefix_ids
from pinyin_hanzi.data.corpus import prepare, read_split
from pinyin_hanzi.data.examples import Example, chunk
from pinyin_hanzi.data.vocab import PAD_ID, Vocab, grown, load_vocab
from pinyin_hanzi.decoding.converter import SHIPPED_MODEL
from pinyin_hanzi.errors import PinyinHanziError
from pinyin_hanzi.models.transformer import Transformer, shift_right, sinusoidal_table
from pinyin_hanzi.runtime import autocast_for, cpu_has_native_bf16, resolve_precision, select_device, set_threads
from pinyin_hanzi.text.lexicon import Lexicon
from pinyin_hanzi.text.pinyin import CLAUSE_PUNCTUATION, hanzi_to_tokens
from pinyin_hanzi.text.typed_input import PREFIX_TOKENS
from pinyin_hanzi.training.loss import summed_loss
from pinyin_hanzi.training.speed import BatchLoss, compile_mode, fast_device, padded_rows
from pinyin_hanzi.visualize import flops_per_token


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


def matmul_peak(device: torch.device, dtype: torch.dtype = torch.float32, size: int = 0, repeats: int = 5) -> float:
    """Median FLOP/s of a (size x size) @ (size x size) product in ``dtype`` on this device (size 0: 8192 on a
    GPU, whose peak a smaller product does not reach, 2048 elsewhere)."""
    size = size or (8192 if device.type == "cuda" else 2048)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
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


def synthetic_corpus(data: DataConfig, n_characters: int = 300_000, seed: int = 0
                     ) -> tuple[list[Example], Vocab, Vocab]:
    """(examples, pinyin vocabulary, hanzi vocabulary): ``n_characters`` characters drawn with probability
    1 / rank from the shipped model's hanzi vocabulary (most frequent first), cut into clauses after clause
    punctuation and into pieces of at most data.max_len; the shipped model's vocabularies. CheckpointError
    if it is missing."""
    state = load_checkpoint(SHIPPED_MODEL)
    pinyin_vocab, hanzi_vocab = Vocab(state[PINYIN_VOCAB_KEY]), Vocab(state[HANZI_VOCAB_KEY])
    readable = {char: tokens[0] for char in hanzi_vocab.tokens[4:]  # after the special tokens
                if (tokens := hanzi_to_tokens(char)) is not None and tokens[0] in pinyin_vocab}
    weights = torch.zeros(len(hanzi_vocab))
    for char in readable:
        weights[hanzi_vocab.ids[char]] = 1 / (hanzi_vocab.ids[char] - 3)  # rank 1 after the 4 special tokens
    ids = torch.multinomial(weights, n_characters, replacement=True, generator=torch.Generator().manual_seed(seed))
    text = "".join(hanzi_vocab.decode(ids.tolist()))
    examples, start = [], 0
    for end in range(len(text)):
        if text[end] in CLAUSE_PUNCTUATION or end == len(text) - 1:
            clause = text[start : end + 1]
            examples += chunk([readable[char] for char in clause], clause, data.max_len)
            start = end + 1
    return examples, pinyin_vocab, hanzi_vocab


def prepared_corpus(data: DataConfig) -> tuple[list[Example], Vocab, Vocab]:
    """(training examples, pinyin vocabulary, hanzi vocabulary) of the config's prepared data."""
    data_dir = prepare(data)
    pinyin_vocab, hanzi_vocab = load_vocab(data_dir / "pinyin_vocab.txt"), load_vocab(data_dir / "hanzi_vocab.txt")
    return read_split(data_dir, "train"), pinyin_vocab, hanzi_vocab


def run_steps(model, optimizer, batches, device, loss, precision: str) -> tuple[int, float]:
    """Train on ``batches`` ((batch on the device, its target tokens) each) in ``precision`` as train.py's
    step does (the loss and gradient norm read back once a step); returns (target tokens, seconds)."""
    tokens = 0
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for batch, n_tokens, padded in batches:
        model.train()
        optimizer.zero_grad(set_to_none=True)
        with autocast_for(device, precision):
            value = loss(batch, padded)
        (value / n_tokens).backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        torch.stack([value.detach().float(), norm.float()]).tolist()
        optimizer.step()
        tokens += n_tokens
    if device.type == "cuda":
        torch.cuda.synchronize()
    return tokens, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    parser.add_argument("--data", default="synthetic", choices=("synthetic", "prepared"),
                        help="synthetic (default, offline) or the config's prepared training split")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="steps per model per round")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default, one per core)")
    parser.add_argument("--reference-precision", default="fp32", metavar="fp32[,bf16]",
                        help="the reference's precision(s), comma-separated; each one is a reference in the same run "
                        "(default fp32; none: ours alone)")
    parser.add_argument("--compile", default="off", metavar="MODE",
                        help="also train ours and the reference compiled in this torch.compile mode (default, "
                        "reduce-overhead, max-autotune; on: reduce-overhead on a GPU, default elsewhere), beside "
                        "ours eager: compiled_vs_eager and vs_stock (compiled against compiled) in the JSON")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="config overrides, e.g. train.loss=full")
    args = parser.parse_intermixed_args()  # overrides before, between or after the flags, as train.py takes them
    check_bounds(parser, [("--rounds", args.rounds, 1, 1000), ("--steps", args.steps, 1, 100_000),
                          ("--threads", args.threads, 0, max_threads())])
    args.reference_precision = [] if args.reference_precision == "none" else args.reference_precision.split(",")
    if not set(args.reference_precision) <= {"fp32", "bf16"}:
        parser.error(f"--reference-precision: expected fp32, bf16, fp32,bf16 or none, not "
                     f"{','.join(args.reference_precision)}")
    try:
        return benchmark(args)
    except PinyinHanziError as error:
        print(f"error: {error}" + (" (the default, --data synthetic, needs no download)"
                                   if args.data == "prepared" else ""), file=sys.stderr)
        return 2


def benchmark(args) -> int:
    config = load_config(args.config, args.overrides)
    set_threads(args.threads)
    device = select_device(args.device)
    precision = resolve_precision(config.train.precision, device)
    fast_device(device)  # TF32 on a GPU, as train.py
    stream, candidates, vocab_sizes = batch_stream(config, args.data, device)
    ours, runners = make_runners(config, args.reference_precision, device, precision, vocab_sizes, candidates,
                                 args.compile)
    peaks = matmul_peaks(device)
    print(f"ours in {precision}; matmul peak fp32 {peaks['fp32'] / 1e9:,.1f}, bf16 {peaks['bf16'] / 1e9:,.1f} GFLOP/s",
          flush=True)
    warm = config.train.length_bucket > 0 and "ours compiled" in runners  # every bucket compiled in round 0
    rates, lengths, candidate_counts = run_rounds(args.rounds, args.steps, runners, stream, candidates, device, warm)
    medians = {name: statistics.median(values) for name, values in rates.items()}
    report(args, config, device, precision, ours, medians, peaks, lengths, candidate_counts)
    return 0


def batch_stream(config, data: str, device: torch.device):
    """The token-budget batches the models train on, from the ``data`` corpus (synthetic or prepared) as
    train.py makes them (data.abbreviate=0.5: typed abbreviated), each syllable's candidate lists on ``device``
    and the sizes of the pinyin and hanzi vocabularies."""
    corpus = synthetic_corpus if data == "synthetic" else prepared_corpus
    examples, pinyin_vocab, hanzi_vocab = corpus(config.data)
    abbreviate = config.data.abbreviate
    if abbreviate > 0:
        pinyin_vocab = grown(pinyin_vocab, sorted(PREFIX_TOKENS))
    candidates = tuple(part.to(device) for part in Lexicon(hanzi_vocab).for_vocab(pinyin_vocab))
    split = encode_split(examples, pinyin_vocab, hanzi_vocab)
    stream = iter(BatchStream(split, config.train.batch_tokens, seed=0, abbreviate=abbreviate,
                              bucket=config.train.length_bucket,
                              prefix_of=prefix_ids(pinyin_vocab) if abbreviate > 0 else None,
                              hanzi_target=hanzi_ids(hanzi_vocab) if abbreviate > 0 else None))
    return stream, candidates, (len(pinyin_vocab), len(hanzi_vocab))


def make_runners(config, reference_precisions: list[str], device: torch.device, precision: str,
                 vocab_sizes: tuple[int, int], candidates: tuple[torch.Tensor, ...], compile_setting: str = "off"
                 ) -> tuple[Transformer, dict]:
    """Our model, and what each model trains with: name -> (model, optimizer, loss of a batch, precision):
    ours eager; with a compile mode, ours compiled (a copy of the same initial weights); then a reference per
    precision, compiled in that mode too (a fair pair), each its own copy. Fused AdamW on a GPU for all."""
    mode = compile_mode(compile_setting, device)
    fused = device.type == "cuda" or None
    use_candidates = config.train.loss == "candidates"
    label_smoothing = config.train.label_smoothing
    buckets = bucket_count(config.data.max_len, config.train.length_bucket)  # > 0: static shapes, as train.py's

    def new_ours() -> Transformer:
        torch.manual_seed(0)
        return Transformer(config.model, source_vocab_size=vocab_sizes[0], target_vocab_size=vocab_sizes[1]).to(device)

    def ours_runner(model: Transformer, model_mode: str | None):
        loss = BatchLoss(model, label_smoothing, candidates if use_candidates else None, mode=model_mode,
                         device=device, buckets=buckets)  # as train.py's step computes it
        return model, torch.optim.AdamW(model.parameters(), lr=1e-4, fused=fused), loss, precision

    ours = new_ours()
    runners = {"ours": ours_runner(ours, None)}
    if mode is not None:
        runners["ours compiled"] = ours_runner(new_ours(), mode)
    for reference_precision in dict.fromkeys(reference_precisions):
        reference = Reference(config.model, *vocab_sizes).to(device)
        runners[f"reference {reference_precision}"] = (
            reference, torch.optim.AdamW(reference.parameters(), lr=1e-4, fused=fused),
            reference_loss(reference, label_smoothing, mode, static=buckets > 0), reference_precision)
    return ours, runners


def reference_loss(model: Reference, label_smoothing: float, mode: str | None, static: bool = False):
    """The reference's summed loss of a batch (full softmax), compiled in ``mode`` (None: eager), with static
    shapes where the batches come in length buckets (``static``), as ours are then."""
    def loss(source, target):
        return summed_loss(model(source, target), target, label_smoothing)

    compiled = loss if mode is None else torch.compile(loss, mode=mode, dynamic=not static)
    graphs = mode is not None and "reduce-overhead" in mode

    def call(batch, padded=True):  # (the stock model takes its padding masks whatever they hold)
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        return compiled(batch.source, batch.target)
    return call


def matmul_peaks(device: torch.device) -> dict[str, float]:
    """The fp32 and bf16 matmul peaks of ``device``, FLOP/s."""
    # Where bf16 is emulated (a CPU without native bf16) it runs below 1 GFLOP/s, and a 2048 product would
    # take minutes; a smaller one measures that rate as well.
    bf16_size = 2048 if device.type != "cpu" or cpu_has_native_bf16() else 512
    return {"fp32": matmul_peak(device), "bf16": matmul_peak(device, torch.bfloat16, size=bf16_size)}


def run_rounds(rounds: int, steps: int, runners: dict, stream, candidates: tuple[torch.Tensor, ...],
               device: torch.device, warm: bool = False) -> tuple[dict[str, list[float]], list[float], list[float]]:
    """Each model's tokens/s in each of ``rounds`` rounds of ``steps`` steps over the same batches, the models
    taking turns; and each batch's mean target length and number of characters in the candidate softmax.
    ``warm``: round 0 also trains on a batch of each shape the next 100 batches hold (length buckets: each
    bucket's compilation then happens there, not in a measured round)."""
    rates: dict[str, list[float]] = {name: [] for name in runners}
    lengths, candidate_counts = [], []
    for round_index in range(rounds + 1):  # round 0 warms up every model and is not counted
        drawn = [next(stream) for _ in range(steps)]
        if warm and round_index == 0:
            shapes = {tuple(batch.source.shape): batch for batch in [next(stream) for _ in range(100)]}
            for batch in drawn:
                shapes.pop(tuple(batch.source.shape), None)  # already in the round
            drawn += shapes.values()
        batches = []
        for batch in drawn:
            n_tokens, padded = batch.n_target_tokens, padded_rows(batch)  # on the CPU, as train_step asks
            batch = batch.to(device)
            batches.append((batch, n_tokens, padded))
            real = batch.target != PAD_ID
            lengths.append(float(real.sum(1).float().mean()))
            candidate_counts.append(1 + float(candidates[1][batch.source].sum(-1)[real].float().mean()))
        for name, (model, optimizer, loss, model_precision) in runners.items():
            tokens, seconds = run_steps(model, optimizer, batches, device, loss, model_precision)
            if round_index:
                rates[name].append(tokens / seconds)
        if round_index:
            print(f"round {round_index}: " + ", ".join(f"{name} {rates[name][-1]:,.0f} tok/s" for name in runners),
                  flush=True)
    return rates, lengths, candidate_counts


def report(args, config, device: torch.device, precision: str, ours: Transformer, medians: dict[str, float],
           peaks: dict[str, float], lengths: list[float], candidate_counts: list[float]) -> None:
    """The ratios to each reference, our achieved FLOP/s against the peak, and the one-line JSON summary.
    With a compile mode: ``compiled_vs_eager`` (ours), ``vs_stock`` (ours compiled over the reference
    compiled) and ``mfu`` (ours compiled, as a fraction of the bf16 matmul peak measured here)."""
    best = "ours compiled" if "ours compiled" in medians else "ours"
    flops = flops_per_token(ours, statistics.mean(lengths))
    training_flops = flops["training"]
    if config.train.loss == "candidates" and device.type != "cuda":
        # the output layer computes the candidates' logits only (candidate_logits; a GPU takes the full product)
        training_flops += 3 * (2 * config.model.d_model * statistics.mean(candidate_counts) - flops["output"])
    references = {name.split()[1]: rate for name, rate in medians.items() if name.startswith("reference")}
    first = args.reference_precision[0] if args.reference_precision else None
    stock = references[first] if first else float("nan")  # --reference-precision none: ours alone
    ours_rate, best_rate = medians["ours"], medians[best]
    summary = {
        "benchmark": "train_throughput", "device": str(device), "threads": torch.get_num_threads(),
        "config": args.config, "data": args.data, "d_model": config.model.d_model,
        "layers": [config.model.n_encoder_layers, config.model.n_decoder_layers],
        "loss": config.train.loss, "abbreviate": config.data.abbreviate, "compile": args.compile,
        "precision": precision, "reference_precision": first, "batch_tokens": config.train.batch_tokens,
        "rounds": args.rounds, "steps_per_round": args.steps, "ours_tokens_per_s": round(ours_rate),
        **({"ours_compiled_tokens_per_s": round(best_rate)} if best != "ours" else {}),
        "reference_tokens_per_s": round(stock) if first else None, "ratio": round(ours_rate / stock, 3) if first else None,
        **{f"ratio_vs_reference_{p}": round(ours_rate / r, 3) for p, r in references.items() if p != first},
        **{f"reference_{p}_tokens_per_s": round(r) for p, r in references.items() if p != first},
        "compiled_vs_eager": round(best_rate / ours_rate, 3), "vs_stock": round(best_rate / stock, 3) if first else None,
        "mfu": round(best_rate * training_flops / max(peaks.values()), 4),  # bf16 peak, but where bf16 is emulated
        "matmul_peak_gflops": round(peaks[precision] / 1e9, 1), "matmul_peak_fp32_gflops": round(peaks["fp32"] / 1e9, 1),
        "matmul_peak_bf16_gflops": round(peaks["bf16"] / 1e9, 1),
        "ours_training_mflops_per_token": round(training_flops / 1e6, 2),
        "reference_training_mflops_per_token": round(flops["training"] / 1e6, 2),
        "ours_achieved_gflops": round(best_rate * training_flops / 1e9, 1),
        "ours_fraction_of_peak": round(best_rate * training_flops / peaks[precision], 3),
    }
    for name, rate in medians.items():
        print(f"{name}: {rate:,.0f} tok/s")
    if first:
        print(f"{best} ({precision}) / reference {first} ({'compiled' if best != 'ours' else 'eager'}): "
              f"{summary['vs_stock']:.3f}")
    print(f"compiled / eager: {summary['compiled_vs_eager']:.3f}")
    print(f"{best} at {summary['ours_achieved_gflops']} GFLOP/s = {summary['ours_fraction_of_peak']:.1%} of the "
          f"{summary['matmul_peak_gflops']} GFLOP/s {precision} matmul peak; MFU (of bf16's) {summary['mfu']:.1%}")
    print(json.dumps(summary))


if __name__ == "__main__":
    sys.exit(main())
