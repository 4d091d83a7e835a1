"""What each converted character was read as (pinyin_hanzi/text/read_as.py): under an abbreviation or a fuzzy
key, the reading the text gives the character, else its most used one; never a rare reading the lexicon
happens to list first (说 shui, 思 sai). Checked in the API's candidates, translate.py's --nbest and --json
lines and the service's ``reading``, with the shipped model."""

import json

from pinyin_hanzi.data.vocab import SPECIALS, Vocab
from pinyin_hanzi.text.lexicon import Lexicon
from pinyin_hanzi.text.read_as import syllables_read

LEXICON = Lexicon(Vocab(list(SPECIALS) + list("说思还原长大行银的")))


def _read(chars: str, *keys: str) -> list[str]:
    return syllables_read(LEXICON, list(chars), list(keys))


def test_an_abbreviated_character_reads_as_the_text_reads_it_else_as_its_most_used_reading():
    # the lexicon alone takes the first syllable of the key in the alphabet that the character may be read as
    assert [LEXICON.syllable_of("说", "sh*"), LEXICON.syllable_of("思", "s*")] == ["shui", "sai"]
    assert _read("说", "sh*") == ["shuo"] and _read("思", "s*") == ["si"]  # the most used reading
    assert _read("还", "h*") == ["hai"] and _read("还原", "h*", "y*") == ["huan", "yuan"]  # in context: 还原 huan
    assert _read("长大", "zh*", "d*") == ["zhang", "da"] and _read("长", "ch*") == ["chang"]  # as typed: ch
    assert _read("说", "sh*1") == ["shuo1"] and _read("说", "sh*4") == ["shui4"]  # a typed tone decides
    assert _read("说", "s*|sh*") == ["shuo"] and _read("说的", "shuo", "de") == ["shuo", "de"]  # fuzzy; full syllables
    assert _read("说", "=说") == ["说"]  # a character typed as itself


def test_the_shipped_model_reports_the_readings_it_converted_in_the_api_nbest_json_and_service(shipped_converter,
                                                                                               capsys):
    from pinyin_hanzi.cli.printing import Printer
    from pinyin_hanzi.serving.schemas import conversion_body

    lines = ["wo m sh d", "bu h y s", "ni3 hao3"]
    found = shipped_converter.convert_lines(lines, nbest=3)
    assert [candidates[0].text for candidates in found] == ["我们说的", "不好意思", "你好"]
    assert found[0][0].read_as == ["wo", "men", "shuo", "de"] and found[1][0].read_as == ["bu", "hao", "yi", "si"]
    assert all("shui" not in candidate.read_as for candidate in found[0])  # 说 in each of the 3 best
    Printer(nbest=3, json=True).print(lines, found)  # translate.py --nbest 3 --json
    as_json = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert as_json[0]["syllables"] == ["wo", "men", "shuo", "de"] and as_json[1]["syllables"] == ["bu", "hao", "yi", "si"]
    assert as_json[0]["candidates"][0]["syllables"] == ["wo", "men", "shuo", "de"]
    Printer(nbest=3).print(lines[:1], found[:1])  # translate.py --nbest 3, piped
    assert capsys.readouterr().out.split("\t")[:3] == ["我们说的", f"{found[0][0].score:.3f}", "wo men shuo de"]
    pieces = [conversion_body(line, candidates)["candidates"][0]["pieces"] for line, candidates in zip(lines, found)]
    assert [piece["reading"] for piece in pieces[1]] == ["bu", "hao", "yi", "si"]  # the service's /convert
    assert pieces[0][2] == {"reading": "shuo", "text": "说", "passthrough": False}
    assert [piece["passthrough"] for piece in pieces[2]] == [False, False]  # ni3 hao3: toned, still converted
