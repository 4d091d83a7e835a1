import zipfile

import pytest
import torch

from pinyin_hanzi.checkpoint import (
    FORMAT_VERSION,
    load_checkpoint,
    model_from_checkpoint,
    save_checkpoint,
)
from pinyin_hanzi.data.corpus import read_split
from pinyin_hanzi.decoding.converter import Converter
from pinyin_hanzi.errors import CheckpointError


def test_checkpoint_is_self_contained_and_round_trips(trained):
    tmp, _, best = trained
    state = load_checkpoint(best)
    assert state["format_version"] == FORMAT_VERSION
    for key in ("config", "pinyin_vocab", "hanzi_vocab", "model", "optimizer", "scheduler", "step",
                "best_accuracy", "batches", "rng"):
        assert key in state
    model, pinyin_vocab, hanzi_vocab, config = model_from_checkpoint(state)
    copy = tmp / "copy.pt"
    save_checkpoint(copy, {k: v for k, v in state.items() if k != "format_version"})
    model_again, *_ = model_from_checkpoint(load_checkpoint(copy))
    examples = read_split(tmp / "prepared" / "tiny", "train")[:5]
    tokens = [e.tokens for e in examples]
    first = Converter(model, pinyin_vocab, hanzi_vocab).convert_tokens(tokens)
    assert Converter(model_again, pinyin_vocab, hanzi_vocab).convert_tokens(tokens) == first
    assert not copy.with_name("copy.pt.tmp").exists()  # written atomically


def test_broken_checkpoints_give_one_line_errors(trained, tmp_path):
    _, _, best = trained
    data = best.read_bytes()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(data[: len(data) // 2])
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint at all")
    text = tmp_path / "text.pt"  # the unpickler reads these bytes as opcodes and fails with an IndexError
    text.write_bytes(b"this is not a checkpoint")
    foreign = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(2)}, foreign)
    old = tmp_path / "old.pt"
    torch.save({**torch.load(best, weights_only=True), "format_version": 99}, old)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    archive = tmp_path / "archive.zip"
    with zipfile.ZipFile(archive, "w") as writer:
        writer.writestr("notes.txt", "not a checkpoint")
    binary = tmp_path / "binary.pt"
    binary.write_bytes(bytes(range(256)))
    not_ours = "is not a pinyin_hanzi checkpoint"
    cases = [(tmp_path / "missing.pt", "checkpoint not found"),
             (truncated, f"{not_ours} (a truncated or damaged torch.save file)"),
             (garbage, f"{not_ours} (a text file)"), (text, f"{not_ours} (a text file)"),
             (empty, f"{not_ours} (an empty file)"),
             (archive, f"{not_ours} (a zip archive, but not one that torch.save wrote)"),
             (binary, f"{not_ours} (not a torch.save file)"),
             ("/dev/zero", f"{not_ours} (a character device, not a file)"),
             (tmp_path / "nul\0.pt", "is not a valid path (embedded null byte)"),
             (foreign, f"{not_ours} (missing keys)"), (old, "format 99")]
    for path, message in cases:
        with pytest.raises(CheckpointError) as raised:
            load_checkpoint(path)
        assert message in str(raised.value) and "\n" not in str(raised.value)


def test_checkpoint_whose_weights_do_not_fit_its_config(trained):
    _, _, best = trained
    state = load_checkpoint(best)
    state["config"]["model"]["d_model"] = 128
    with pytest.raises(CheckpointError, match="weights do not fit .*size mismatch"):
        model_from_checkpoint(state)
    state["config"]["model"]["d_model"], state["config"]["model"]["n_heads"] = 64, 3
    with pytest.raises(CheckpointError, match="config or vocabularies do not fit"):
        model_from_checkpoint(state)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_one_non_finite_weight_in_any_precision_is_refused(trained, dtype, bad):
    from pinyin_hanzi.checkpoint import validate_checkpoint

    _, _, best = trained
    state = load_checkpoint(best)
    state["model"] = {name: tensor.to(dtype) for name, tensor in state["model"].items()}
    validate_checkpoint(state)
    name = sorted(state["model"])[-1]
    state["model"][name].view(-1)[-1] = bad
    with pytest.raises(CheckpointError, match=f"{name} holds NaN or infinite values"):
        validate_checkpoint(state)


def test_a_tensor_without_values_a_quantized_one_or_a_plain_pickle_is_one_line_without_warnings(trained, tmp_path):
    """A meta tensor (a shape, no values: any arithmetic on it raised a traceback) in any entry, a quantized
    weight, a pickle that torch.save did not write: each a CheckpointError of one line saying what is wrong,
    with none of the warnings torch gives about such files on the way."""
    import pickle
    import warnings

    _, _, best = trained
    state = load_checkpoint(best)
    name, weight = next(iter(state["model"].items()))
    syllables = state["syllable_lm"]
    table, column = next((key, inner) for key, value in syllables.items() if isinstance(value, dict)
                         for inner, tensor in value.items() if isinstance(tensor, torch.Tensor))  # (packed columns)
    with warnings.catch_warnings():  # making a quantized tensor warns that they are deprecated
        warnings.simplefilter("ignore")
        quantized = torch.quantize_per_tensor(weight.float(), 0.1, 0, torch.qint8)
    files = {"meta.pt": {**state, "model": {**state["model"], name: torch.empty(weight.shape, device="meta")}},
             "meta_syllables.pt": {**state, "syllable_lm": {**syllables, table: {
                 **syllables[table], column: torch.empty(3, dtype=torch.long, device="meta")}}},
             "quantized.pt": {**state, "model": {**state["model"], name: quantized}}}
    for file, content in files.items():
        torch.save(content, tmp_path / file)
    (tmp_path / "plain.pkl").write_bytes(pickle.dumps({"model": {}, "step": 1}))
    for file, message in [("meta.pt", f"its model holds a tensor without values ({name} is on the meta device)"),
                          ("meta_syllables.pt", f"syllable_lm holds a tensor without values ({table}.{column} is on"),
                          ("quantized.pt", f"({name} is not a dense floating-point tensor (torch.qint8"),
                          ("plain.pkl", "(a pickle file that torch.save did not write: only torch.save files")]:
        with warnings.catch_warnings(record=True) as caught, pytest.raises(CheckpointError) as raised:
            warnings.simplefilter("always")
            load_checkpoint(tmp_path / file)
        assert message in str(raised.value) and "\n" not in str(raised.value), str(raised.value)
        assert [str(warning.message)[:80] for warning in caught] == [], file


def test_a_crash_while_writing_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"step": 1, "weights": torch.ones(3)})
    before = path.read_bytes()

    def dies_half_way(obj, handle):  # as if the process were killed after writing some bytes
        handle.write(b"PK\x03\x04 half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"step": 2, "weights": torch.zeros(3)})
    assert path.read_bytes() == before
    assert torch.load(path, weights_only=True)["step"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]  # Ctrl-C leaves no temporary file either


def test_a_failed_write_is_one_line_keeps_the_previous_checkpoint_and_leaves_no_temporary_file(tmp_path,
                                                                                               monkeypatch):
    import errno

    path = tmp_path / "last.pt"
    save_checkpoint(path, {"step": 1, "weights": torch.ones(3)})
    before = path.read_bytes()

    def disk_fills_up(obj, handle):
        handle.write(b"PK\x03\x04 the first blocks")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_fills_up)
    with pytest.raises(CheckpointError, match=f"cannot write checkpoint {path}: No space left on device$") as raised:
        save_checkpoint(path, {"step": 2, "weights": torch.zeros(3)})  # the checkpoint named, not its .tmp
    assert raised.value.__cause__.errno == errno.ENOSPC  # what training reads to say what it kept
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.pt"]
    monkeypatch.undo()
    with pytest.raises(CheckpointError, match="it is a directory"):
        save_checkpoint(tmp_path, {"step": 2})
    with pytest.raises(CheckpointError, match="last.pt is a file, not a folder"):
        save_checkpoint(path / "model.pt", {"step": 2})


def _broken(state: dict, **changes) -> dict:
    return {**state, **changes}


def test_entries_of_the_wrong_type_give_one_line_errors(trained, tmp_path):
    _, _, best = trained
    state = load_checkpoint(best)
    syllable_lm, model = state["syllable_lm"], state["model"]
    cases = [
        (dict(config=["not", "a", "dict"]), "its config is not a dict"),
        (dict(model={**model, "extra": [1, 2]}), "its model is not a dict of tensors"),
        (dict(model=torch.zeros(3)), "its model is not a dict of tensors"),
        (dict(hanzi_vocab=["<pad>", 3]), "its hanzi_vocab is not a list of str"),
        (dict(pinyin_vocab="abc"), "its pinyin_vocab is not a list of str"),
        (dict(step="12"), "its step is not an integer"),
        (dict(step=True), "its step is not an integer"),
        (dict(best_accuracy="high"), "its best_accuracy is not a finite number"),
        (dict(optimizer=[1]), "its optimizer is not a dict"),
        (dict(syllable_lm={**syllable_lm, "syllables": syllable_lm["syllables"][:-1]}),
         "its syllable model cannot be read .counts that do not pair up"),
        (dict(syllable_lm={**syllable_lm, "bigram_counts": {"zlib": b"x"}}), "its syllable model cannot be read"),
        (dict(syllable_lm={**syllable_lm, "syllables": ["ni", "ni"]}), "no list of distinct syllables"),
        # files written before the syllable model was packed hold two dicts of counts
        (dict(syllable_lm={"unigrams": {"ni": 1}}), "its syllable model has no bigrams counts"),
        (dict(syllable_lm={"unigrams": {"ni": 1.5}, "bigrams": {}}), "its syllable model has no unigrams counts"),
        (dict(char_lm=[3]), "its char_lm is not a dict"),
        (dict(char_lm={"order": 3}), "character n-gram model cannot be read .*count it again"),
        (dict(format_version="1"), "has checkpoint format '1'"),
    ]
    for changes, message in cases:
        path = tmp_path / "broken.pt"
        torch.save(_broken(state, **changes), path)
        with pytest.raises(CheckpointError, match=message) as raised:
            load_checkpoint(path)
        assert "\n" not in str(raised.value) and str(path) in str(raised.value)


def test_a_character_ngram_model_must_fit_the_hanzi_vocabulary(trained, tmp_path):
    from pinyin_hanzi.data.vocab import Vocab
    from pinyin_hanzi.lm.char_ngram import count_for

    tmp, _, best = trained
    state = load_checkpoint(best)
    hanzi_vocab = Vocab(state["hanzi_vocab"])
    lm = count_for(read_split(tmp / "prepared" / "tiny", "train"), hanzi_vocab, order=2).state_dict()
    path = tmp_path / "lm.pt"
    save_checkpoint(path, {**state, "char_lm": lm})
    assert load_checkpoint(path)["char_lm"]["order"] == 2
    save_checkpoint(path, {**state, "char_lm": {**lm, "vocab_size": len(hanzi_vocab) + 1}})
    with pytest.raises(CheckpointError, match="vocab_size .* expected the hanzi vocabulary's"):
        load_checkpoint(path)
    save_checkpoint(path, {**state, "char_lm": {**lm, "tables": {}}})
    with pytest.raises(CheckpointError, match="no tables of orders 2..2"):
        load_checkpoint(path)


def test_inference_parts_are_what_the_checkpoint_holds(trained, tmp_path):
    from pinyin_hanzi.checkpoint import load_for_inference
    from pinyin_hanzi.lm.char_ngram import CharNgramLM, count_for
    from pinyin_hanzi.lm.syllable import SyllableBigrams

    tmp, _, best = trained
    state = load_checkpoint(best)
    parts = load_for_inference(best)
    assert parts.pinyin_vocab.tokens == state["pinyin_vocab"] and parts.hanzi_vocab.tokens == state["hanzi_vocab"]
    assert parts.config.to_dict() == state["config"] and parts.char_lm is None
    assert all(torch.equal(parts.model.state_dict()[name], tensor) for name, tensor in state["model"].items())
    assert isinstance(parts.syllable_lm, SyllableBigrams)
    assert parts.syllable_lm.bigrams == SyllableBigrams.from_state_dict(state["syllable_lm"]).bigrams
    examples = read_split(tmp / "prepared" / "tiny", "train")
    lm = count_for(examples, parts.hanzi_vocab, order=2)
    with_lm = tmp_path / "with_lm.pt"
    save_checkpoint(with_lm, {**state, "char_lm": lm.state_dict()})
    loaded = load_for_inference(with_lm).char_lm
    assert isinstance(loaded, CharNgramLM)
    ids = parts.hanzi_vocab.encode(examples[0].hanzi)
    assert loaded.sentence_log_prob(ids) == pytest.approx(lm.sentence_log_prob(ids))
    # tables of the right types that do not fit one another
    from pinyin_hanzi.lm.char_ngram_state import table_columns

    runs = table_columns(lm.state_dict()["tables"][2])["runs"]
    broken = lm.state_dict()
    broken["tables"][2]["runs"] = runs[:-1]  # (a plain tensor: as files from before packed columns hold them)
    save_checkpoint(with_lm, {**state, "char_lm": broken})
    with pytest.raises(CheckpointError, match="character n-gram model cannot be read"):
        load_for_inference(with_lm)


def test_an_exported_checkpoint_cannot_be_resumed(trained, tmp_path):
    from pinyin_hanzi.checkpoint import require_resumable
    from pinyin_hanzi.checkpoint_copies import export_checkpoint

    _, _, best = trained
    require_resumable(load_checkpoint(best), str(best))
    exported = tmp_path / "model.pt"
    export_checkpoint(best, exported)
    with pytest.raises(CheckpointError, match="cannot resume from .*holds no optimizer, scheduler, best_accuracy, "
                                              "batches, rng.*--init-from"):
        require_resumable(load_checkpoint(exported), str(exported))


# ---- hostile checkpoints: every entry, at every level, replaced by values of the wrong kind

_WRONG_VALUES = [None, "text", -1, 2**70, float("nan"), {"x": 1}, torch.tensor(float("nan")), torch.zeros(3, 3),
                 torch.ones(4, dtype=torch.int64)]


def _mutated_tensors(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The same entry with NaN, infinities, another dtype, a wrong shape, one element less, or unsorted."""
    out = [tensor.flip(0) if tensor.dim() else tensor, tensor[:-1] if tensor.dim() and len(tensor) else tensor,
           tensor.reshape(1, -1), tensor.to(torch.complex64) if not tensor.dtype == torch.bool else tensor.int()]
    if tensor.is_floating_point():
        out += [torch.full_like(tensor, float("nan")), torch.full_like(tensor, float("inf")), tensor.long()]
    elif tensor.numel():
        out += [tensor.float(), tensor * 0 - 1, tensor + 10**9, tensor.bool()]
    return out


def _mutations(state: dict):
    """(description, broken state) for each entry of ``state`` and of the dicts inside it (config sections,
    the language models and their tables, a few weights): each wrong value, each tensor mutation, removal."""
    def walk(value, path):
        if isinstance(value, dict):
            for key, item in list(value.items())[: 3 if path == ("model",) else 10]:  # a few of each
                yield from walk(item, path + (key,))
        yield path, value

    for path, original in walk(state, ()):
        if not path or path[0] in ("optimizer", "scheduler", "batches", "rng"):  # --resume's own test
            continue
        replacements = list(_WRONG_VALUES) + (_mutated_tensors(original) if isinstance(original, torch.Tensor) else [])
        for replacement in replacements + [_REMOVE]:
            yield "/".join(map(str, path)) + f" = {type(replacement).__name__}", _replaced(state, path, replacement)


_REMOVE = object()


def _replaced(state, path, replacement):
    if len(path) == 1:
        copy = dict(state)
        if replacement is _REMOVE:
            del copy[path[0]]
        else:
            copy[path[0]] = replacement
        return copy
    return {**state, path[0]: _replaced(state[path[0]], path[1:], replacement)}


def test_malformed_checkpoints_give_only_checkpoint_errors(trained, tmp_path):
    """Hundreds of broken copies of a valid checkpoint (with character and word models): reading each one
    either gives a CheckpointError of one line or parts that convert; never another exception. Every copy
    goes through the checks and the rebuilding that loading does (validate_checkpoint, inference_parts);
    every 25th also through a file and load_for_inference, and the first few that load convert a line."""
    from pinyin_hanzi.checkpoint import inference_parts, load_for_inference, validate_checkpoint
    from pinyin_hanzi.data.vocab import Vocab
    from pinyin_hanzi.lm.char_ngram import count_for
    from pinyin_hanzi.lm.word import WordLexiconLM

    tmp, _, best = trained
    state = load_checkpoint(best)
    hanzi_vocab = Vocab(state["hanzi_vocab"])
    state["char_lm"] = count_for(read_split(tmp / "prepared" / "tiny", "train"), hanzi_vocab, order=3).state_dict()
    state["word_lm"] = WordLexiconLM.from_frequencies({"你好": 3.0, "北京": 2.0, "我们": 1.0}, hanzi_vocab).state_dict()
    state["config"]["decode"].update(lm_weight=0.5, word_weight=0.5)
    validate_checkpoint(state)
    path = tmp_path / "broken.pt"
    loaded = failed = 0
    for number, (description, broken) in enumerate(_mutations(state)):
        try:
            if number % 25 == 0:
                torch.save(broken, path)
                parts = load_for_inference(path)
            else:
                validate_checkpoint(broken, str(path))
                parts = inference_parts(broken, str(path))
        except CheckpointError as error:
            assert "\n" not in str(error) and str(path) in str(error), (description, str(error))
            failed += 1
            continue
        if loaded < 5:
            converter = Converter(parts.model, parts.pinyin_vocab, parts.hanzi_vocab, syllable_lm=parts.syllable_lm,
                                  char_lm=parts.char_lm, lm_weight=0.5, word_lm=parts.word_lm, word_weight=0.5)
            assert isinstance(converter.convert_lines(["ni hao bei jing"], beam=2)[0][0].text, str), description
        loaded += 1
    assert failed > 300 and loaded > 10  # most breakages are caught; harmless ones (a step of -1) still load


def test_a_junk_checkpoint_through_translate_is_one_line(tmp_path, monkeypatch, capsys):
    from pinyin_hanzi.cli import translate

    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"this is not a checkpoint")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "best.pt").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    for argument, message in ((junk, f"{junk} is not a pinyin_hanzi checkpoint (a text file)"),
                              (tmp_path / "run", f"is a directory: name a checkpoint file in it ({tmp_path / 'run' / 'best.pt'})")):
        assert translate.main(["--checkpoint", str(argument), "ni"]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1 and err.startswith("error: ") and message in err


def test_no_language_model_module_imports_the_checkpoint_layout():
    """The layout imports the language models (LANGUAGE_MODELS: entry -> class) and each model checks its own
    stored state (``state_problem``), so no module of pinyin_hanzi/lm imports a checkpoint module, at its top
    or inside a function: there is no import cycle to dodge."""
    import ast
    from pathlib import Path

    import pinyin_hanzi.lm
    from pinyin_hanzi.checkpoint import LANGUAGE_MODELS

    modules = sorted(Path(pinyin_hanzi.lm.__file__).parent.glob("*.py"))
    assert {stored.model.__module__.rsplit(".", 1)[1] for stored in LANGUAGE_MODELS.values()} <= {
        path.stem for path in modules}
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            assert not [name for name in names if name.startswith("pinyin_hanzi.checkpoint")], (path.name, names)
