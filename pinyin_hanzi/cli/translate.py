"""``python translate.py``: convert typed pinyin (arguments, --input FILE, stdin, an interactive prompt),
score a split (--evaluate) or draw attention (--attention), through the Python API (converter.py)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pinyin_hanzi.cli import check_bounds, check_image_path, load_converter, max_threads, run, write_output
from pinyin_hanzi.cli import learning
from pinyin_hanzi.cli.printing import Printer
from pinyin_hanzi.cli.line_stream import MAX_LINE_BYTES, check_input, line_batches
from pinyin_hanzi.config import LIMITS, MAX_NBEST, shown
from pinyin_hanzi.errors import DataError, OutputError
from pinyin_hanzi.evaluation.metrics import ABBREVIATION_STYLES
from pinyin_hanzi.text.shuangpin import LAYOUTS
from pinyin_hanzi.text.typed_input import FUZZY_PAIRS, split_lines


def _check_typed(text: str, where: str) -> str:
    """``text`` itself; DataError if it holds bytes that were not UTF-8. Python decodes such command-line
    arguments to lone surrogates ("surrogateescape"), which would otherwise reach stdout as garbage."""
    if any("\udc80" <= char <= "\udcff" for char in text):
        raise DataError(f"{where} is not valid UTF-8")
    return text


def _read_pairs(name: str):
    """The examples of a user's pinyin<TAB>hanzi file; lines that do not fit are counted on stderr, not
    dropped silently. DataError if the file is missing, unreadable, not UTF-8 or has no usable line."""
    from collections import Counter

    from pinyin_hanzi.data.corpus import read_examples  # --evaluate only: plain conversion starts without it

    path = Path(name)
    if not path.exists():
        raise DataError(f"file not found: {path}")
    if not path.is_file():  # a directory; a device or FIFO, which scoring would read whole (/dev/zero: forever)
        raise DataError(f"cannot read {path}: --evaluate reads a regular file of pinyin<TAB>hanzi lines")
    skipped: Counter = Counter()
    examples = read_examples(path, skipped=skipped)
    if skipped:
        reasons = ", ".join(f"{count} {reason}" for reason, count in skipped.most_common())
        print(f"note: skipped {sum(skipped.values())} of {sum(skipped.values()) + len(examples)} lines of "
              f"{path} ({reasons})", file=sys.stderr)
    return examples


def _is_prepared_split(name: str) -> bool:
    """train, valid, test, or one source's part of a mix (test.novels, valid.reviews); else a file."""
    return name in ("train", "valid", "test") or (
        name.split(".")[0] in ("valid", "test") and not name.endswith(".tsv") and "/" not in name)


def _evaluate(converter, args, options: dict, examples, other=None) -> int:
    """Score the conversion of a prepared split (``args.evaluate`` is train/valid/test or test.<source>)
    or of ``examples`` read from the user's file, with the command line's ``options``; with ``other``
    (--compare), score both on it side by side."""
    # --evaluate only: plain conversion starts without the data and evaluation modules
    from pinyin_hanzi.data.corpus import prepared_split, read_examples
    from pinyin_hanzi.evaluation.evaluate import compare_file, evaluate_file

    if examples is None:  # a named split: prepared from the checkpoint's data config if need be
        path = prepared_split(converter.config.data, args.evaluate, log=lambda note: print(note, file=sys.stderr))
        examples = read_examples(path, trusted=True)
    else:
        path = Path(args.evaluate)
    typing = {"unsegmented": args.unsegmented, "abbreviate": args.abbreviate, "abbreviate_as": args.abbreviate_as}
    if other is not None:
        words = tuple(model.decode.user_words for model in (converter, other))
        return _report_comparison(path, compare_file(converter, other, examples, **typing, **options, progress=True),
                                  args, words)
    result = {"file": str(path), "user_words": converter.decode.user_words or None,
              **evaluate_file(converter, examples, **typing, **options, progress=True)}
    style, beam = ABBREVIATION_STYLES[args.abbreviate_as], result["beam"]  # the settings evaluate_file resolved
    abbreviated = f" with {args.abbreviate:.0%} of syllables typed as their {style}" if args.abbreviate else ""
    mode = (f"{'unsegmented' if args.unsegmented else 'segmented'} input{abbreviated}, "
            f"{'constrained' if result['constrained'] else 'unconstrained'} "
            f"{'greedy' if beam == 1 else f'beam {beam}'}")
    report = [f"{result['file']}: {result['sentences']} sentences, {result['characters']} characters, {mode}"]
    line = (f"character accuracy {result['char_accuracy']:.2%}  CER {result['cer']:.2%}  "
            f"exact sentences {result['exact']:.2%}")
    if "top5" in result:
        line += f"  top-1/3/5 {result['top1']:.2%} / {result['top3']:.2%} / {result['top5']:.2%}"
    write_output("\n".join([*report, line, json.dumps(result, ensure_ascii=False)]) + "\n")
    return 0


def _report_comparison(path, result: dict, args, words: tuple[str, str]) -> int:
    """The comparison's lines and its JSON; ``words``: each model's user dictionary ("" none), which names it
    where the two differ (one checkpoint with and without a dictionary)."""
    low, high = result["interval"]
    names = [args.checkpoint or "default model", args.compare]
    if words[0] != words[1]:
        names = [f"{name} {f'with {used}' if used else 'without user words'}" for name, used in zip(names, words)]
    if low > 0 or high < 0:
        verdict = f"{names[1]} is {'worse' if low > 0 else 'better'} (the interval excludes 0)"
    else:
        verdict = "no difference the sentences can tell apart (the interval includes 0)"
    write_output("\n".join([
        f"{path}: {result['sentences']} sentences, {result['characters']} characters",
        f"CER {result['cer']:.2%} ({names[0]}) vs {result['other_cer']:.2%} ({names[1]}): "
        f"difference {result['difference'] * 100:+.2f} points, 95% interval [{low * 100:+.2f}, {high * 100:+.2f}]; "
        f"{result['better']} sentences better, {result['worse']} worse",
        verdict, json.dumps({"file": str(path), "compare": args.compare, "user_words": words[0] or None,
                             "compare_user_words": words[1] or None, **result}, ensure_ascii=False)]) + "\n")
    return 0


def _draw_attention(converter, line: str, options: dict, args) -> None:
    from pinyin_hanzi.visualize import save_figure, sentence_attention  # matplotlib: --attention only

    best = converter.convert_lines([line], **options)[0][0]
    if not best.text:
        raise DataError("nothing to draw: the input converts to an empty line")
    longest = len(max(best.syllables, best.text, key=len))
    window = converter.planner.window
    if longest > window:  # the model takes one window at a time; a longer line has no one picture
        raise DataError(f"--attention draws a line of at most {window} syllables and characters; this "
                        f"one has {longest}: draw a part of it")
    source_ids = converter.pinyin_vocab.encode(best.syllables)
    target_ids = converter.hanzi_vocab.encode(best.text)
    figure, note = sentence_attention(converter.model, source_ids, target_ids, best.syllables, best.text,
                                      kind=args.attention_kind, heads=args.heads)
    try:
        save_figure(figure, args.attention)
    except OSError as error:
        raise DataError(f"cannot write {args.attention}: {error.strerror}") from None
    if note:
        print(f"note: {note}", file=sys.stderr)
    print(f"attention image written to {args.attention}", file=sys.stderr)


def _conversion_options(args) -> dict:
    """``Converter.convert_lines``' decoding options from the command line, the same for every mode; one not
    given is None: the checkpoint's decode.* setting (--prefixes auto: on for a model trained with
    abbreviations)."""
    return {"beam": args.beam, "constrained": False if args.unconstrained else None, "batch_size": args.batch_size,
            "prefixes": args.prefixes, "fuzzy": args.fuzzy,
            "shuangpin": "" if args.shuangpin == "none" else args.shuangpin}


def _fail_fast(args) -> None:
    """The errors that do not need the model (missing files, text that is not UTF-8, a closed standard input
    or output, an input that is a directory), before the seconds it takes to load it. DataError,
    CheckpointError or OutputError."""
    _check_typed(" ".join(args.text), "the pinyin argument")
    if sys.stdout is None:
        raise OutputError("cannot write output: standard output is closed")
    named = [path for path in (args.checkpoint, args.compare) if path is not None]
    if named:  # imported only then: it imports torch, which the errors below need not wait for
        from pinyin_hanzi.checkpoint import check_checkpoint_path

        for path in named:
            check_checkpoint_path(path)  # CheckpointError for a missing file or a directory
    if args.evaluate is None and not args.text:  # lines come from --input FILE or standard input
        check_input("-" if args.input is None else args.input)  # (--input '' is an error, not standard input)
    if args.history and os.path.lexists(args.history):  # a damaged or foreign history
        from pinyin_hanzi.lm.history import read_file

        read_file(args.history)
    for path in {args.user_words, args.compare_user_words} - {None, ""}:
        from pinyin_hanzi.lm.user_words import UserWords

        # DataError for a missing file, a directory or one too large; what its lines hold, the converter reads
        # (once: reading it here too cost a 60 MB dictionary its seconds twice)
        UserWords.check(path)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="translate.py", description="Convert pinyin into hanzi with a trained checkpoint.",
        epilog='examples: python translate.py "ni hao" | python translate.py --nbest 5 xian | '
               "python translate.py --input lines.txt | python translate.py --evaluate test --beam 1")
    parser.add_argument("text", nargs="*", help="pinyin to convert (all arguments form one line); a lone '-': "
                        "standard input; without text or --input, an interactive prompt on a terminal, else "
                        "standard input")
    parser.add_argument("--checkpoint", help="checkpoint file (default: the one $PINYIN_HANZI_CHECKPOINT names, "
                        "else the shipped pinyin_hanzi/pretrained/model.pt)")
    parser.add_argument("--input", metavar="FILE", help="convert each line of FILE ('-' for stdin), printed as it "
                        f"arrives from a pipe or FIFO; a line may hold up to {MAX_LINE_BYTES:,} bytes")
    _add_decoding_arguments(parser)
    _add_output_arguments(parser)
    _add_evaluation_arguments(parser)
    _add_history_arguments(parser)
    parser.add_argument("--batch-size", type=int, default=256, help="sentences decoded together (default 256)")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N, mps, or auto: CUDA, then "
                        "MPS, then the CPU")
    parser.add_argument("--threads", type=int, default=0,
                        help="CPU threads (default: 1 for text typed on the command line or at the prompt, "
                             "one per core for --input and --evaluate)")
    return parser


def _add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--beam", type=int, help="beam size, 1 for greedy (default: the checkpoint's decode.beam, "
                        "5 unless its config says otherwise)")
    parser.add_argument("--lm-weight", type=float, metavar="W",
                        help="weight of the checkpoint's character n-gram model in beam search (default: its "
                             "decode.lm_weight; 0: the Transformer alone; greedy decoding never uses it)")
    parser.add_argument("--word-weight", type=float, metavar="W",
                        help="weight of the checkpoint's word model in beam search (default: its decode.word_weight; "
                             "0: none; greedy decoding never uses it)")
    parser.add_argument("--user-words", metavar="FILE",
                        help="a user dictionary: one word a line, optionally its pinyin and a weight (as in "
                             "data/user_words.txt); its words are preferred where the syllables allow them ('none': "
                             "none; default: the checkpoint's decode.user_words)")
    parser.add_argument("--user-weight", type=float, metavar="W",
                        help="weight of the user dictionary in the search: about W per character of a user word "
                             "(default: the checkpoint's decode.user_weight)")
    parser.add_argument("--fuzzy", action="append", metavar="PAIRS",
                        help=f"fuzzy pinyin pairs, comma-separated or repeated (z-zh,n-l; 'none' for none); "
                             f"known: {', '.join(FUZZY_PAIRS)} (default: the checkpoint's decode.fuzzy)")
    parser.add_argument("--shuangpin", choices=(*LAYOUTS, "none"),
                        help="read letters as double-pinyin key pairs of this layout; none: full pinyin "
                             "(default: the checkpoint's decode.shuangpin)")
    parser.add_argument("--prefixes", choices=("auto", "on", "off"),
                        help="letters that begin a syllable stand for it (bei j, wxqbj); auto: on for a model "
                             "trained with abbreviations (default: the checkpoint's decode.prefixes)")
    parser.add_argument("--unconstrained", action="store_true",
                        help="let the model choose any character (the checkpoint's decode.constrained=false does too)")


def _add_history_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--history", metavar="FILE",
                        help="a user history: what you accept at the prompt (or --session commits) is learned into "
                             "FILE and preferred from then on; loaded at start, saved as it grows ('none': none; "
                             "default: the checkpoint's decode.history, else in memory only)")
    parser.add_argument("--forget", action="store_true", help="with --history: empty that history, then exit")
    parser.add_argument("--session", metavar="FILE",
                        help="a typing session: each line 'pinyin<TAB>committed hanzi' is converted (printed) and "
                             "then the committed text is learned; '-' for stdin")


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nbest", type=int, default=1,
                        help=f"print the N best conversions (1-{MAX_NBEST}): on a terminal one per line (rank, text, "
                             "score, the syllables it was read as), a blank line between input lines; piped, "
                             "one output line per input line: text, score, syllables of each, all tab-separated")
    parser.add_argument("--json", action="store_true", help="one JSON object per line: input, output, "
                        "segmentation, syllables, candidates with scores, notes")
    parser.add_argument("--chinese-punctuation", action="store_true",
                        help="ASCII , . ? ! after a hanzi become ，。？！")
    parser.add_argument("--verbose", action="store_true", help="say on stderr where a fallback character was used")
    parser.add_argument("--attention", metavar="IMAGE", help="also draw the attention of the converted text into "
                        "IMAGE (.png, .svg, .pdf, ...)")
    parser.add_argument("--attention-kind", default="cross", choices=("cross", "encoder", "decoder"),
                        help="cross (characters x syllables, default), encoder or decoder self-attention")
    parser.add_argument("--heads", action="store_true", help="with --attention: one row per head, not averaged")


def _add_evaluation_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--evaluate", metavar="SPLIT_OR_FILE",
                        help="score on a prepared split (train/valid/test, or one source of a mix: test.novels) "
                        "or a pinyin<TAB>hanzi file")
    parser.add_argument("--compare", metavar="CHECKPOINT",
                        help="with --evaluate: also convert with CHECKPOINT (same decoding options) and report the "
                             "CER difference sentence by sentence, with a 95%% bootstrap interval")
    parser.add_argument("--compare-user-words", metavar="FILE",
                        help="with --compare: the user dictionary of the --compare model ('none': none; default: "
                             "--user-words), e.g. one model with and without a dictionary")
    parser.add_argument("--unsegmented", action="store_true", help="with --evaluate: type syllables run together")
    parser.add_argument("--abbreviate", type=float, default=0.0, metavar="P",
                        help="with --evaluate: type this share (0-1) of syllables as their initial (b for bei), "
                             "the same syllables every run; abbreviations are read as such unless --prefixes off")
    parser.add_argument("--abbreviate-as", choices=ABBREVIATION_STYLES, default="initial",
                        help="with --abbreviate: type an abbreviated syllable as its initial (zh for zhong, "
                             "default) or its first letter only (z for zhong)")


def _parse(argv) -> argparse.Namespace:
    """The command line, checked: an argparse usage error (exit 2) for options that do not go together or a
    number out of range. A lone '-' becomes --input -, and --fuzzy a set of pair names."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.text == ["-"]:  # as in most Unix tools, a lone '-' is standard input
        if args.input is not None or args.evaluate is not None:
            parser.error("give pinyin text, --input FILE or --evaluate SPLIT_OR_FILE, not several")
        args.text, args.input = [], "-"
    if sum([bool(args.text), args.input is not None, args.evaluate is not None, args.session is not None]) > 1:
        parser.error("give pinyin text, --input FILE, --session FILE or --evaluate SPLIT_OR_FILE, not several")
    if args.forget and not args.history:
        parser.error("--forget needs --history FILE: the history to empty")
    if args.session == "":
        parser.error("--session needs a file name ('-' for standard input)")
    check_bounds(parser, [("--beam", args.beam, *LIMITS["decode.beam"]), ("--nbest", args.nbest, 1, MAX_NBEST),
                          ("--batch-size", args.batch_size, *LIMITS["decode.batch_sentences"]),
                          ("--lm-weight", args.lm_weight, *LIMITS["decode.lm_weight"]),
                          ("--word-weight", args.word_weight, *LIMITS["decode.word_weight"]),
                          ("--user-weight", args.user_weight, *LIMITS["decode.user_weight"]),
                          ("--threads", args.threads, 0, max_threads()), ("--abbreviate", args.abbreviate, 0, 1)])
    if args.attention is not None:
        check_image_path(parser, "--attention", args.attention)
    for option, needs, alone in (
            ("--abbreviate", "--evaluate", args.abbreviate and args.evaluate is None),
            ("--abbreviate-as", "--abbreviate", args.abbreviate_as != "initial" and not args.abbreviate),
            ("--compare", "--evaluate", args.compare is not None and args.evaluate is None),
            ("--compare-user-words", "--compare", args.compare_user_words is not None and args.compare is None),
            ("--attention", "pinyin text to convert", args.attention is not None and not args.text)):
        if alone:
            parser.error(f"{option} needs {needs}")
    if args.fuzzy is not None:
        names = {name.strip() for value in args.fuzzy for name in value.split(",")} - {"", "none"}
        unknown = sorted(names - FUZZY_PAIRS.keys())
        if unknown:
            parser.error(f"--fuzzy: unknown pair {shown(unknown[0])} (known: {', '.join(FUZZY_PAIRS)})")
        args.fuzzy = frozenset(names)
    for name in ("user_words", "compare_user_words", "history"):  # 'none' as --fuzzy and --shuangpin take it: ""
        if getattr(args, name) in ("none", ""):
            setattr(args, name, "")
    return args


LINES_PER_CALL = 16  # batches of ready lines handed to one convert_lines call (see _translate)


def _set_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _translate(argv) -> int:
    args = _parse(argv)
    if args.forget:
        return learning.forget(args.history)
    _fail_fast(args)
    interactive = args.input is None and args.evaluate is None and (args.text or args.session or sys.stdin.isatty())
    threads = args.threads or (1 if interactive else 0)
    if args.threads:
        _set_threads(args.threads)
    user_pairs = None
    if args.evaluate is not None and not _is_prepared_split(args.evaluate):
        user_pairs = _read_pairs(args.evaluate)  # before loading the model: a bad file fails at once
    weights = {"device": args.device, "lm_weight": args.lm_weight, "word_weight": args.word_weight,
               "user_words": args.user_words, "user_weight": args.user_weight, "history": args.history}
    converter = load_converter(args.checkpoint, **weights)  # on every core unless --threads: bulk table work
    from pinyin_hanzi.runtime import startup_done  # (torch is loaded by now)

    startup_done()  # translate.py paused the collector from its first line
    if threads and not args.threads:
        # One sentence decodes (1, d) x (d, d) products: splitting them over threads costs more in
        # synchronisation than it gains (10-syllable sentence, shared 2-core machine: several times slower
        # with 2 threads).
        _set_threads(threads)
    try:
        if args.evaluate is not None:
            weights["history"] = ""  # one history, one owner: the compared model learns nothing
            if args.compare_user_words is not None:
                weights["user_words"] = args.compare_user_words
            other = load_converter(args.compare, **weights) if args.compare is not None else None
            return _evaluate(converter, args, _conversion_options(args), user_pairs, other)
        return _convert(converter, args)
    finally:
        converter.history.close()  # saves what was learned: translate.py ends with os._exit, no atexit


def _convert(converter, args) -> int:
    """Convert what the command line names: its text, a --session, the prompt, or --input / stdin's lines."""
    options = _conversion_options(args)
    # On a terminal a person reads the n best one per line; piped, a program reads one line per input line.
    printer = Printer(nbest=args.nbest, json=args.json, verbose=args.verbose,
                       table=args.nbest > 1 and not args.json and sys.stdout.isatty())

    def candidates(lines: list[str], nbest: int = 1) -> list:
        return converter.convert_lines(lines, nbest=max(nbest, printer.nbest),
                                       chinese_punctuation=args.chinese_punctuation, **options)

    def show(line: str, found: list) -> None:
        printer.print([line], [found[: printer.nbest]])

    if args.text:
        if args.attention:  # first: a line it cannot draw fails before any output
            _draw_attention(converter, " ".join(args.text), options, args)
        lines = split_lines(" ".join(args.text))
        printer.print(lines, candidates(lines))
    elif args.session is not None:
        learning.session(converter, args.session, candidates, show)
    elif args.input is None and sys.stdin.isatty():
        learning.interactive(learning.Prompt(converter, candidates, show), _check_typed)
    else:
        # Lines that are ready (a file: all of them) go to the converter many batches at a time, up to about a
        # megabyte: it sorts them by length before it batches them, and a batch of lines of like length decodes
        # with little padding (2,000 held-out everyday sentences, one thread: 21 s instead of 35 in calls of 256).
        source = "-" if args.input is None else args.input
        for lines in line_batches(source, args.batch_size * LINES_PER_CALL, max_chars=1 << 20):
            printer.print(lines, candidates(lines))
    return 0


def main(argv=None) -> int:
    return run(_translate, argv)


if __name__ == "__main__":
    sys.exit(main())
