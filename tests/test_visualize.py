import hashlib
import subprocess
import sys

import pytest
import torch
from PIL import Image
from conftest import FRESH_ENV
from test_cli import ROOT, run

from pinyin_hanzi import visualize
from pinyin_hanzi.cli import positional_encoding
from pinyin_hanzi.config import ModelConfig
from pinyin_hanzi.models.transformer import Transformer

from cjk_font import write_cjk_font


def _image(path):
    with Image.open(path) as image:
        return image.size, hashlib.md5(image.tobytes()).hexdigest()


def test_attention_images_from_the_cli_differ_between_inputs(trained, tmp_path, capsys):
    from pinyin_hanzi.cli import translate

    _, _, best = trained
    sizes = {}
    digests = {}
    for name, text, extra in [("a", "wo men qu bei jing ba", []), ("b", "ni hao", []),
                              ("heads", "wo men qu bei jing ba", ["--heads"]),
                              ("encoder", "wo men qu bei jing ba", ["--attention-kind", "encoder"])]:
        path = tmp_path / f"{name}.png"  # in this process: the command's work, not four interpreter start-ups
        assert translate.main(["--checkpoint", str(best), "--attention", str(path), *extra, text]) == 0
        assert path.is_file() and "attention image written" in capsys.readouterr().err
        sizes[name], digests[name] = _image(path)
    assert all(width >= 200 and height >= 200 for width, height in sizes.values())
    assert len(set(digests.values())) == 4  # different inputs, heads and kinds give different pictures
    assert sizes["heads"][1] > 2 * sizes["a"][1]  # one row per head (4 heads)
    usage = run(ROOT / "translate.py", "--checkpoint", best, "--attention", tmp_path / "x.png", "--input", "-")
    assert usage.returncode == 2 and "needs pinyin text" in usage.stderr


def test_positional_encoding_plot(tmp_path):
    first, second = tmp_path / "pe1.png", tmp_path / "pe2.png"
    assert positional_encoding.main([str(first)]) == 0
    assert positional_encoding.main([str(second), "--dims", "2", "3", "--d-model", "64"]) == 0
    (width, height), digest = _image(first)
    assert width >= 600 and height >= 200 and digest != _image(second)[1]
    with pytest.raises(SystemExit):
        positional_encoding.main([str(first), "--dims", "300"])


def test_the_training_runs_positional_encoding_picture_is_drawn_once_and_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("PINYIN_HANZI_CACHE", str(tmp_path / "cache"))
    drawn = visualize.positional_encoding_pixels(32, 20)
    kept = tmp_path / "cache" / "figures" / "positional_encoding_32x20.png"
    assert drawn.shape[2] == 3 and drawn.shape[1] >= 600 and kept.is_file()

    def not_again(*args):
        raise AssertionError("drawn again")

    monkeypatch.setattr(visualize, "positional_encoding_figure", not_again)
    assert (visualize.positional_encoding_pixels(32, 20) == drawn).all()  # read back, not drawn
    monkeypatch.undo()
    monkeypatch.setenv("PINYIN_HANZI_CACHE", str(tmp_path / "cache"))
    kept.write_bytes(b"not a png")  # damaged: drawn again and kept anew
    assert (visualize.positional_encoding_pixels(32, 20) == drawn).all() and _image(kept)[0] == drawn.shape[1::-1]
    assert visualize.positional_encoding_pixels(32, 21).shape[0] == drawn.shape[0]  # another size, another file
    assert sorted(path.name for path in kept.parent.iterdir()) == [kept.name, "positional_encoding_32x21.png"]
    monkeypatch.setenv("PINYIN_HANZI_CACHE", "off")
    assert (visualize.positional_encoding_pixels(32, 20) == drawn).all()


def test_romanised_labels_without_a_cjk_font(monkeypatch):
    monkeypatch.setattr(visualize, "cjk_font", lambda: None)
    labels, note = visualize.hanzi_labels("你好,", ["ni", "hao", ","])
    assert labels == ["ni:0", "hao:1", ","] and "no CJK font" in note
    figure = visualize.attention_figure([torch.full((2, 3, 3), 1 / 3)], labels, ["ni", "hao", ","])
    assert len(figure.axes) == 1


# Run in a process whose home and matplotlib cache are a test's own: the name of the CJK font found, if any.
_FIND_CJK_FONT = "from pinyin_hanzi.visualize import cjk_font; print(cjk_font())"
_CACHED_FONT_NAMES = "from matplotlib import font_manager; print(sorted({f.name for f in font_manager.fontManager.ttflist}))"


def test_a_cjk_font_installed_after_matplotlib_cached_its_font_list_is_found(tmp_path):
    """matplotlib caches its font list on first use: a font installed later used to stay unseen, with the
    hint to install one shown for good. Now the system's fonts are scanned again, and the cache rewritten."""
    environment = {**FRESH_ENV, "HOME": str(tmp_path / "home"),
                   "MPLCONFIGDIR": str(tmp_path / "matplotlib")}

    def python(code):
        done = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    if python(_FIND_CJK_FONT) != "None":  # its cache is written now, without the font below
        pytest.skip("a CJK font is installed on this machine: no font list without one to start from")
    write_cjk_font(tmp_path / "home" / ".fonts" / "wqy-microhei.ttf", "WenQuanYi Micro Hei")  # as a package would
    assert "WenQuanYi Micro Hei" not in python(_CACHED_FONT_NAMES)  # the stale cache
    assert python(_FIND_CJK_FONT) == "WenQuanYi Micro Hei"
    assert "WenQuanYi Micro Hei" in python(_CACHED_FONT_NAMES)  # the next run finds it without a scan


def test_cjk_punctuation_is_drawn_without_a_cjk_font(monkeypatch, recwarn):
    """Punctuation is no hanzi to romanise, but DejaVu Sans has no glyph for 、 or 《 either: without a CJK
    font it is written as ASCII on both sides of the picture, so that no label is drawn as boxes (and
    matplotlib warns of no missing glyph)."""
    monkeypatch.setattr(visualize, "cjk_font", lambda: None)
    syllables = ["ni", "hao", "、", "《", "shi", "》", "！"]
    labels, note = visualize.hanzi_labels("你好、《是》！", syllables)
    assert labels == ["ni:0", "hao:1", ",", "<<", "shi:4", ">>", "!"] and note
    keys = [visualize.drawable(token) for token in syllables]
    assert keys == ["ni", "hao", ",", "<<", "shi", ">>", "!"]
    assert visualize.drawable("㐀") == "?"
    weights = [torch.full((2, 7, 7), 1 / 7)]
    figure = visualize.attention_figure(weights, labels, keys)
    figure.canvas.draw()
    assert not [w for w in recwarn if "missing from font" in str(w.message)]
    visualize.attention_figure(weights, labels, syllables).canvas.draw()  # the test can tell: 、 has no glyph
    assert [w for w in recwarn if "missing from font" in str(w.message)]


def test_model_summary_counts_every_parameter_once_and_flops_add_up():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=1, d_ff=64),
                        source_vocab_size=30, target_vocab_size=50)
    summary = visualize.model_summary(model, batch_tokens=1000, mean_length=10)
    counts = [int(line.split()[-1].replace(",", "")) for line in summary.splitlines()[1:-3]
              if "(tied" not in line] + [0]
    total = sum(p.numel() for p in model.parameters())
    assert f"{total:,}" in summary and sum(counts) == total
    flops = visualize.flops_per_token(model, 10)
    assert flops["output"] == 2 * 32 * 50
    assert flops["forward"] == flops["encoder"] + flops["decoder"] + flops["output"]
    assert flops["encoder"] == 2 * 2 * (4 * 32 * 32 + 2 * 10 * 32 + 2 * 32 * 64)


def test_training_logs_pictures_to_tensorboard(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tmp, _, _ = trained
    events = EventAccumulator(str(tmp / "runs" / "tiny"), size_guidance={"images": 0, "histograms": 0})
    events.Reload()
    tags = events.Tags()
    assert {"attention/cross_0", "attention/cross_1", "model/positional_encoding"} <= set(tags["images"])
    assert {"weights/encoder_layer_1", "weights/decoder_layer_2"} <= set(tags["histograms"])
    assert len(events.Images("attention/cross_0")) == 2  # one per evaluation: alignment emerging
    assert {"train/loss", "train/lr", "train/grad_norm", "train/tokens_per_second", "valid/loss",
            "valid/char_accuracy"} <= set(tags["scalars"])
