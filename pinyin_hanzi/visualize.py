"""Pictures of the model, as the textbook draws them: attention maps, positional-encoding curves and
matrix, and the numbers a learner needs to reason about cost (parameters, FLOPs per token).

Hanzi labels need a CJK font. We look for one matplotlib can use (Noto Sans CJK, Source Han Sans,
WenQuanYi, SimHei, PingFang, Microsoft YaHei, ...); on Debian/Ubuntu ``apt-get install fonts-wqy-microhei``
(5 MB) or ``fonts-noto-cjk`` provides one, found also when installed after matplotlib cached its font list.
Without a font, hanzi labels are romanised (``zhong:2`` for the character at position 2 read zhong) and a note
says so.

The positional-encoding picture from the command line: ``python -m pinyin_hanzi.cli.positional_encoding
out.png --dims 0 1 20 40 --d-model 256``.
"""

from __future__ import annotations

import functools
import os
import tempfile
import unicodedata
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from pinyin_hanzi.models.transformer import Transformer, sinusoidal_table
from pinyin_hanzi.text.pinyin import is_hanzi

CJK_FONT_NAMES = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN",
                  "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "SimHei", "Microsoft YaHei", "PingFang SC",
                  "Heiti SC", "AR PL UMing CN", "AR PL UKai CN", "Droid Sans Fallback")


def _pyplot():
    import matplotlib  # matplotlib (~0.5 s) only when a figure is drawn, not for a model summary

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


@functools.lru_cache(maxsize=1)
def cjk_font() -> str | None:
    """Name of an installed font that has hanzi, or None. matplotlib lists the fonts it found when it first
    ran, from a cache file, so a font installed since then is not in that list: when the list has no CJK
    font, the system's font folders are scanned once more (:func:`_add_new_system_fonts`) before giving up."""
    from matplotlib import font_manager  # as in _pyplot: only when drawing

    return _known_cjk_font(font_manager.fontManager) or _add_new_system_fonts(font_manager)


def _known_cjk_font(manager) -> str | None:
    installed = {font.name for font in manager.ttflist}
    return next((name for name in CJK_FONT_NAMES if name in installed), None)


def _add_new_system_fonts(font_manager) -> str | None:
    """Add the system's fonts that matplotlib's font list lacks (installed after its cache was written) to
    that list, and return the name of a CJK font among them, or None. The cache is rewritten when one is
    found, so that later runs find it at once; a cache that cannot be written is left as it is."""
    manager = font_manager.fontManager
    known = {font.fname for font in manager.ttflist}
    for path in font_manager.findSystemFonts():
        if path not in known:
            try:
                manager.addfont(path)
            except (OSError, RuntimeError, ValueError):  # a font file matplotlib cannot read: as at start-up
                continue
    found = _known_cjk_font(manager)
    if found is not None:
        import matplotlib  # as in _pyplot

        cache = Path(matplotlib.get_cachedir()) / f"fontlist-v{font_manager.FontManager.__version__}.json"
        try:
            font_manager.json_dump(manager, cache)
        except OSError:
            pass
    return found


# CJK punctuation that NFKC leaves as it is, written the way a font without CJK glyphs can draw it
_CJK_PUNCTUATION = str.maketrans({"、": ",", "。": ".", "「": "[", "」": "]", "『": "[", "』": "]", "《": "<<",
                                  "》": ">>", "〈": "<", "〉": ">", "【": "[", "】": "]", "〔": "(", "〕": ")",
                                  "・": "·", "〃": '"', "～": "~"})


def _is_cjk(char: str) -> bool:
    return ord(char) >= 0x2E80


def drawable(label: str) -> str:
    """``label`` as a font without CJK glyphs draws it: full-width forms as ASCII (NFKC), CJK punctuation as
    its nearest ASCII, anything else CJK as ``?``."""
    plain = unicodedata.normalize("NFKC", label).translate(_CJK_PUNCTUATION)
    return "".join("?" if _is_cjk(char) else char for char in plain)


def hanzi_labels(chars: str, syllables: Sequence[str]) -> tuple[list[str], str | None]:
    """Labels for target characters, and a note if they had to be romanised for lack of a CJK font: a hanzi
    as the syllable it was read as and its position, CJK punctuation as ASCII (:func:`drawable`)."""
    if cjk_font() is not None or not any(map(_is_cjk, chars)):
        return list(chars), None
    labels = [f"{syllable}:{i}" if is_hanzi(char) else drawable(char)
              for i, (char, syllable) in enumerate(zip(chars, syllables))]
    return labels, ("no CJK font found: hanzi labels are romanised (install one, e.g. Debian/Ubuntu's "
                    "fonts-wqy-microhei or fonts-noto-cjk: the next run finds it)")


def attention_figure(weights: Sequence[torch.Tensor], query_labels: Sequence[str], key_labels: Sequence[str], *,
                     heads: bool = False, title: str = ""):
    """A matplotlib figure of one sentence's attention: ``weights`` holds one (h, queries, keys) tensor per
    layer; one panel per layer with heads averaged, or one row per head with ``heads``."""
    plt = _pyplot()
    font = cjk_font()
    # Some CJK fonts (Droid Sans Fallback) have no Latin letters: matplotlib takes each glyph from the first
    # family of the list that has it, so the pinyin labels come from DejaVu Sans (matplotlib's own) there.
    font = [font, "DejaVu Sans"] if font else None
    layers = len(weights)
    n_heads = weights[0].shape[0]
    rows = n_heads if heads else 1
    size = max(2.5, 0.32 * max(len(query_labels), len(key_labels)) + 1.2)
    figure, axes = plt.subplots(rows, layers, figsize=(size * layers, size * rows), squeeze=False)
    for layer, layer_weights in enumerate(weights):
        panels = layer_weights if heads else layer_weights.mean(dim=0, keepdim=True)
        for row, panel in enumerate(panels):
            axis = axes[row][layer]
            axis.imshow(panel.float().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0)
            axis.set_xticks(range(len(key_labels)))
            axis.set_yticks(range(len(query_labels)))
            kwargs = {"fontfamily": font} if font else {}
            axis.set_xticklabels(key_labels, rotation=90, fontsize=8, **kwargs)
            axis.set_yticklabels(query_labels, fontsize=9, **kwargs)
            axis.set_title(f"layer {layer + 1}" + (f", head {row + 1}" if heads else " (heads averaged)"), fontsize=9)
    if title:
        figure.suptitle(title, fontfamily=font) if font else figure.suptitle(title)
    figure.tight_layout()
    return figure


def save_figure(figure, path: str | Path) -> None:
    plt = _pyplot()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def sentence_attention(model: Transformer, source_ids: list[int], target_ids: list[int], syllables: Sequence[str],
                       text: str, kind: str = "cross", heads: bool = False):
    """Figure of ``kind`` attention ("cross": characters x syllables, "encoder": syllables x syllables,
    "decoder": characters x characters) for one converted sentence, and a note (or None)."""
    device = next(model.parameters()).device
    maps = model.attention_maps(torch.tensor([source_ids], device=device), torch.tensor([target_ids], device=device))
    chars, note = hanzi_labels(text, syllables)
    if note is not None:  # the pinyin side holds the same punctuation (、 “ 》)
        syllables = [drawable(token) for token in syllables]
    inputs = ["<s>"] + chars[:-1]  # what each decoder position sees as its input
    queries, keys = {"cross": (chars, list(syllables)), "encoder": (list(syllables), list(syllables)),
                     "decoder": ([f"{c} ←" for c in chars], inputs)}[kind]
    titles = {"cross": "cross-attention: characters (rows) attend to syllables",
              "encoder": "encoder self-attention: syllables attend to syllables",
              "decoder": "decoder self-attention (look-ahead masked): output row sees inputs up to it"}
    weights = [layer[0] for layer in maps[kind]]
    return attention_figure(weights, queries, keys, heads=heads, title=titles[kind]), note


DEFAULT_PE_DIMS = (0, 1, 20, 40, 80, 120)  # wavelengths from 2π to ~2,000 positions


def positional_encoding_figure(d_model: int = 256, positions: int = 100, dims: Sequence[int] = DEFAULT_PE_DIMS):
    """The book's picture: PE(pos, i) against position for a few dimensions, and the whole matrix."""
    plt = _pyplot()
    table = sinusoidal_table(positions, d_model)
    figure, (curves, matrix) = plt.subplots(1, 2, figsize=(12, 4))
    for dim in [dim for dim in dims if dim < d_model]:
        kind = "sin" if dim % 2 == 0 else "cos"
        curves.plot(range(positions), table[:, dim].numpy(), label=f"dim {dim} ({kind})")
    curves.set_xlabel("position")
    curves.set_ylabel("PE value")
    curves.legend(fontsize=8)
    curves.set_title("sinusoidal positional encoding, chosen dimensions")
    image = matrix.imshow(table.numpy(), aspect="auto", cmap="RdBu", vmin=-1, vmax=1)
    matrix.set_xlabel("dimension")
    matrix.set_ylabel("position")
    matrix.set_title(f"PE matrix ({positions} positions x {d_model} dimensions)")
    figure.colorbar(image, ax=matrix)
    figure.tight_layout()
    return figure


def positional_encoding_pixels(d_model: int, positions: int) -> np.ndarray:
    """:func:`positional_encoding_figure` for TensorBoard, as RGB pixels (height, width, 3). Drawn once per
    (d_model, positions) and kept as a PNG in the cache folder (lm/lookup_cache.py), because importing
    matplotlib and drawing take about 1.6 s of every training start (docs/benchmarks.md); where there is no
    cache folder, or the file cannot be read or written, it is drawn each time."""
    from PIL import Image  # matplotlib's own dependency, which TensorBoard's images need too

    from pinyin_hanzi.lm.lookup_cache import cache_folder

    folder = cache_folder()
    path = folder / "figures" / f"positional_encoding_{d_model}x{positions}.png" if folder is not None else None
    if path is not None and path.is_file():
        try:
            with Image.open(path) as image:
                return np.asarray(image.convert("RGB"))
        except (OSError, ValueError):  # damaged (a disk error, another program): drawn again below
            pass
    figure = positional_encoding_figure(d_model, positions)
    figure.canvas.draw()
    pixels = np.asarray(figure.canvas.buffer_rgba())[:, :, :3].copy()
    _pyplot().close(figure)
    if path is not None:
        _keep_png(pixels, path)
    return pixels


def _keep_png(pixels: np.ndarray, path: Path) -> None:
    """Write ``pixels`` to ``path`` whole or not at all (aside, then renamed: two runs may write at once);
    where the folder is read-only or full, nothing is kept and the next run draws the picture again."""
    from PIL import Image

    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".png.tmp", delete=False) as handle:
            temporary = Path(handle.name)
            Image.fromarray(pixels).save(handle, format="PNG")
        os.replace(temporary, path)
    except OSError:
        if temporary is not None:
            temporary.unlink(missing_ok=True)


def flops_per_token(model: Transformer, length: float) -> dict[str, float]:
    """Forward multiply-adds x 2 per target token, for sentences of ``length`` tokens (source = target
    length here): matrix products of the projections, attention scores and weighted sums, feed-forward
    and output layer. Training costs about 3x the forward pass."""
    c = model.config
    d, ff, vocab = c.d_model, c.d_ff, model.output.out_features
    encoder = c.n_encoder_layers * (4 * d * d + 2 * length * d + 2 * d * ff)
    decoder = c.n_decoder_layers * (4 * d * d + 2 * length * d + 4 * d * d + 2 * length * d + 2 * d * ff)
    output = d * vocab
    forward = 2 * (encoder + decoder + output)
    return {"encoder": 2 * encoder, "decoder": 2 * decoder, "output": 2 * output, "forward": forward,
            "training": 3 * forward}


def model_summary(model: Transformer, batch_tokens: int, mean_length: float) -> str:
    """Parameters per module, tokens per batch and FLOPs per token, as printed when training starts."""
    counted: set[int] = set()
    rows = []
    for name, module in [("source embedding", model.source_embedding), ("target embedding", model.target_embedding),
                         *[(f"encoder layer {i + 1}", m) for i, m in enumerate(model.encoder_layers)],
                         *[(f"decoder layer {i + 1}", m) for i, m in enumerate(model.decoder_layers)],
                         ("final norms", torch.nn.ModuleList([model.encoder_norm, model.decoder_norm])),
                         ("output projection", model.output)]:
        fresh = [p for p in module.parameters() if id(p) not in counted]
        counted.update(id(p) for p in fresh)
        shared = " (tied to the target embedding)" if name == "output projection" and model.config.tie_output else ""
        rows.append(f"  {name:<20} {sum(p.numel() for p in fresh):>12,}{shared}")
    total = sum(p.numel() for p in model.parameters())
    flops = flops_per_token(model, mean_length)
    return "\n".join(["model summary", *rows, f"  {'total':<20} {total:>12,}",
                      f"  tokens per batch     {batch_tokens:>12,} (target tokens, padding included)",
                      f"  FLOPs per token      {flops['forward'] / 1e6:>12.1f} M forward, {flops['training'] / 1e6:.1f} M "
                      f"training (mean length {mean_length:.1f}; output layer {flops['output'] / 1e6:.1f} M)"])
