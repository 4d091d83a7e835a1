"""Command-line front ends of ``train.py`` and ``translate.py``: argument parsing, one-line errors."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Iterable, Iterator

from pinyin_hanzi.errors import CheckpointError, DataError, PinyinHanziError

EXIT_USER_ERROR = 2


def _run(main, argv) -> int:
    """Run ``main(argv)``; user errors become one line on stderr and exit status 2, never a traceback."""
    try:
        return main(argv) or 0
    except PinyinHanziError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


# ------------------------------------------------------------------------------------------------- train


def _train(argv) -> int:
    parser = argparse.ArgumentParser(
        prog="train.py", description="Train a pinyin -> hanzi Transformer.",
        epilog="example: python train.py --config configs/quickstart.yaml train.max_steps=2000 train.lr=5e-4")
    parser.add_argument("--config", required=True, help="YAML experiment file, e.g. configs/quickstart.yaml")
    parser.add_argument("overrides", nargs="*", metavar="section.key=value", help="override config values")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--resume", action="store_true", help="continue checkpoints/<train.name>/last.pt exactly")
    mode.add_argument("--init-from", metavar="CHECKPOINT", help="start a new run from these weights")
    mode.add_argument("--prepare-only", action="store_true", help="build data/prepared/ and stop")
    args = parser.parse_args(argv)

    from pinyin_hanzi.config import load_config
    from pinyin_hanzi.corpus import prepare

    config = load_config(args.config, args.overrides)
    if args.prepare_only:
        out = prepare(config.data)
        print((out / "stats.json").read_text(encoding="utf-8"), end="")
        return 0
    from pinyin_hanzi.training import train

    best = train(config, resume=args.resume, init_from=args.init_from, log=lambda message: print(message, file=sys.stderr))
    print(best)
    return 0


def train_main(argv=None) -> int:
    return _run(_train, argv)


# --------------------------------------------------------------------------------------------- translate


def _open_lines(name: str) -> Iterator[str]:
    """Lines of a UTF-8 file (or stdin for '-'), without their line ends. Read as bytes and decoded line by
    line, so that an invalid line is reported with its number."""
    if name == "-":
        stream = sys.stdin.buffer
    else:
        path = Path(name)
        if not path.is_file():
            raise DataError(f"input file not found: {name}")
        try:
            stream = open(path, "rb")
        except OSError as error:
            raise DataError(f"cannot read input file {name}: {error.strerror}") from None
    try:
        for line_number, raw in enumerate(stream, start=1):
            try:
                yield raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise DataError(f"{name}: line {line_number} is not valid UTF-8") from None
    finally:
        if name != "-":
            stream.close()


def _chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def load_converter(checkpoint: str | None, device: str = "cpu"):
    """A Converter for ``checkpoint``, or for the newest ``checkpoints/*/best.pt`` (named on stderr)."""
    from pinyin_hanzi.checkpoint import load_checkpoint, model_from_checkpoint, newest_checkpoint
    from pinyin_hanzi.decoding import Converter
    from pinyin_hanzi.training import select_device

    if checkpoint is None:
        found = newest_checkpoint()
        if found is None:
            raise CheckpointError("no checkpoint found under checkpoints/: train one with "
                                  "`python train.py --config configs/quickstart.yaml` or pass --checkpoint PATH")
        print(f"using checkpoint {found}", file=sys.stderr)
        checkpoint = str(found)
    state = load_checkpoint(checkpoint)
    model, pinyin_vocab, hanzi_vocab, config = model_from_checkpoint(state, checkpoint)
    return Converter(model, pinyin_vocab, hanzi_vocab, select_device(device)), config


def _evaluate(converter, config, target: str, constrained: bool, batch_size: int) -> dict:
    from pinyin_hanzi.corpus import prepared_dir, read_examples
    from pinyin_hanzi.metrics import conversion_scores

    if target in ("train", "valid", "test"):
        path = prepared_dir(config.data) / f"{target}.tsv"
        if not path.is_file():
            raise DataError(f"{path} not found: prepare the data with "
                            f"`python train.py --config CONFIG --prepare-only`, or pass a pinyin<TAB>hanzi file")
    else:
        path = Path(target)
    examples = read_examples(path)
    hypotheses = converter.convert_tokens([e.tokens for e in examples], constrained=constrained, batch_size=batch_size)
    scores = conversion_scores(hypotheses, [e.hanzi for e in examples])
    return {"file": str(path), "constrained": constrained, **scores}


def _translate(argv) -> int:
    parser = argparse.ArgumentParser(
        prog="translate.py", description="Convert pinyin into hanzi with a trained checkpoint.",
        epilog='examples: python translate.py "ni hao" | python translate.py --input lines.txt | '
               "python translate.py --evaluate test")
    parser.add_argument("text", nargs="*", help="pinyin to convert (all arguments form one line)")
    parser.add_argument("--checkpoint", help="checkpoint file (default: newest checkpoints/*/best.pt)")
    parser.add_argument("--input", metavar="FILE", help="convert each line of FILE ('-' for stdin)")
    parser.add_argument("--evaluate", metavar="SPLIT_OR_FILE",
                        help="score on a prepared split (train/valid/test) or a pinyin<TAB>hanzi file")
    parser.add_argument("--unconstrained", action="store_true", help="let the model choose any character")
    parser.add_argument("--batch-size", type=int, default=256, help="sentences decoded together (default 256)")
    parser.add_argument("--device", default="cpu", choices=("auto", "cpu", "cuda", "mps"))
    args = parser.parse_args(argv)
    modes = sum([bool(args.text), args.input is not None, args.evaluate is not None])
    if modes != 1:
        parser.error("give pinyin text, --input FILE, or --evaluate SPLIT_OR_FILE (exactly one)")
    if args.batch_size < 1:
        parser.error("--batch-size must be at least 1")

    converter, config = load_converter(args.checkpoint, args.device)
    constrained = not args.unconstrained
    if args.evaluate is not None:
        result = _evaluate(converter, config, args.evaluate, constrained, args.batch_size)
        print(f"{result['file']}: {result['sentences']} sentences, {result['characters']} characters, "
              f"{'constrained' if constrained else 'unconstrained'} greedy")
        print(f"character accuracy {result['char_accuracy']:.2%}  CER {result['cer']:.2%}  "
              f"exact sentences {result['exact']:.2%}")
        print(json.dumps(result, ensure_ascii=False))
        return 0
    if args.text:
        print(converter.convert([" ".join(args.text)], constrained=constrained)[0])
        return 0
    for chunk in _chunks(_open_lines(args.input), args.batch_size):
        outputs = converter.convert(chunk, constrained=constrained, batch_size=args.batch_size)
        sys.stdout.write("".join(output + "\n" for output in outputs))
        sys.stdout.flush()
    return 0


def translate_main(argv=None) -> int:
    return _run(_translate, argv)
