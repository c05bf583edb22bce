"""The core BM25 index and reciprocal rank fusion."""

from __future__ import annotations

import math
import random
import re
from pathlib import Path

import pytest

from ctx_retrieval import DuplicateChunkIdError, InvalidInputError, reciprocal_rank_fusion, tokenize
from ctx_retrieval.retrieval.bm25 import BM25Index
from ctx_retrieval.retrieval.fusion import DEFAULT_RRF_K

TEXTS = {
    "a": "The DiffExecutor runs two executors on the same input.",
    "b": "A scheduler picks the next testcase from the corpus.",
    "c": "The executor forwards run_target calls to the primary executor.",
    "d": "Nothing relevant here at all.",
}


def test_tokenizer_splits_identifiers_keeps_them_whole_and_keeps_scripts() -> None:
    from ctx_retrieval import tokenize_parts

    assert tokenize_parts("DiffExecutor.run_target HTTPServer parseJSON2Html") == [
        "diff", "executor", "run", "target", "http", "server", "parse", "json", "2", "html"]
    assert tokenize("DiffExecutor.run_target HTTPServer parseJSON2Html") == [
        "diff", "executor", "diffexecutor", "run", "target", "run_target", "http", "server", "httpserver",
        "parse", "json", "2", "html", "parsejson2html"]
    assert tokenize("plain words __init__ x2") == ["plain", "words", "init", "x2"]  # one part: nothing to add
    assert tokenize_parts("Café 日本語テキスト, emoji 🎉 and RTL שלום") == [
        "café", "日本語テキスト", "emoji", "and", "rtl", "שלום"]  # the legacy tokenizer keeps a CJK run whole
    # the default: CJK runs as characters + overlapping bigrams (Lucene's CJK analyzer), other scripts whole
    assert tokenize("Café 日本語テキスト, emoji 🎉 and RTL שלום") == [
        "café", "cafe", "日", "日本", "本", "本語", "語", "語テ", "テ", "テキ", "キ", "キス", "ス", "スト", "ト",
        "emoji", "and", "rtl", "שלום"]
    assert tokenize("ACME公司２０２３年营收") == ["acme", "公", "公司", "司", "2023", "年", "年营", "营", "营收", "收"]
    for tok in (tokenize, tokenize_parts):
        assert tok("") == [] and tok("--- !!! ---") == []
    # a query naming the identifier ranks the chunk that defines it above one that only shares its words
    texts = ["def run_target(self): ...", "run the target, then run the target again: target run"]
    margin = {}
    for name in ("identifiers", "parts"):
        found = dict(BM25Index(["def", "words"], texts, tokenizer=name).search("run_target", 2))
        margin[name] = found["def"] - found.get("words", 0.0)
    assert margin["parts"] < 0 < margin["identifiers"]  # only the whole identifier puts the definition first
    from ctx_retrieval.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="identifiers, folded, thai, parts"):
        BM25Index(["a"], ["a"], tokenizer="whitespace")


def test_ascii_text_is_cut_as_every_identifier_is_on_its_own() -> None:
    from ctx_retrieval.retrieval.bm25 import _identifier_tokens

    rng = random.Random(3)
    letters = "aAbBzZ09_ .-("
    texts = ["".join(rng.choice(letters) for _ in range(rng.randint(0, 14))) for _ in range(5000)]
    texts += ["DiffExecutor.run_target HTTPServer parseJSON2Html Claude2 X2abc ABC A a1 __init__ _x_ 2026 iOS"]
    for text in texts:  # the fast path for ASCII text, against the identifier rule it shortcuts
        assert tokenize(text) == [t for word in re.findall(r"\w+", text) for t in _identifier_tokens(word)], text


def test_scores_follow_the_bm25_formula() -> None:
    index = BM25Index(list(TEXTS), list(TEXTS.values()))
    tokens = {k: tokenize(v) for k, v in TEXTS.items()}
    avg = sum(len(t) for t in tokens.values()) / len(tokens)
    df = sum(1 for t in tokens.values() if "executor" in t)
    idf = math.log1p((4 - df + 0.5) / (df + 0.5))

    def expected(doc: str) -> float:
        tf = tokens[doc].count("executor")
        return idf * tf * 2.5 / (tf + 1.5 * (1 - 0.75 + 0.75 * len(tokens[doc]) / avg))

    scores = index.scores("executor")
    for n, doc in enumerate(TEXTS):
        assert scores[n] == pytest.approx(expected(doc), rel=1e-5)


def test_every_term_scores_every_text_as_the_formula_says() -> None:
    # Postings are grouped by term with one sort over typed buffers: check every (term, text) cell of a corpus
    # whose terms first appear in many different texts, against the formula computed from plain token lists.
    rng = random.Random(7)
    words = [f"w{i}" for i in range(60)]
    texts = [" ".join(rng.choices(words, k=rng.randint(0, 25))) for _ in range(200)]
    index = BM25Index([str(i) for i in range(len(texts))], texts)
    tokens = [tokenize(t) for t in texts]
    avg = sum(map(len, tokens)) / len(tokens)
    for word in {w for t in tokens for w in t}:
        df = sum(1 for t in tokens if word in t)
        idf = math.log1p((len(texts) - df + 0.5) / (df + 0.5))
        expected = [idf * t.count(word) * 2.5 / (t.count(word) + 1.5 * (0.25 + 0.75 * len(t) / avg)) for t in tokens]
        assert index.scores(word).tolist() == pytest.approx(expected, rel=1e-5), word
    assert len(BM25Index([], [])) == 0 and BM25Index([], []).search("w1") == []


def test_search_ranks_and_skips_non_matches() -> None:
    index = BM25Index(list(TEXTS), list(TEXTS.values()))
    hits = index.search("primary executor run_target", k=10)
    assert hits[0][0] == "c" and {h[0] for h in hits} == {"a", "c"}
    assert index.search("absent words", k=5) == []
    assert [h[0] for h in index.search("executor", k=1)] == ["c"]


def test_save_into_a_folder_and_load_back_read_or_memory_mapped(tmp_path: Path) -> None:
    import numpy as np

    index = BM25Index(list(TEXTS), list(TEXTS.values()))
    index.save(tmp_path / "bm25")
    assert sorted(p.name for p in (tmp_path / "bm25").iterdir()) == ["docs.npy", "indptr.npy", "meta.json",
                                                                     "weights.npy"]
    query = "scheduler corpus testcase"
    for mmap in (False, True):
        loaded = BM25Index.load(tmp_path / "bm25", mmap=mmap)
        assert loaded.search(query, 3) == index.search(query, 3)
        assert isinstance(loaded._weights, np.memmap) is mmap  # mapped, not read, when asked
    (tmp_path / "bm25" / "weights.npy").unlink()
    with pytest.raises(InvalidInputError, match="no saved BM25 index"):
        BM25Index.load(tmp_path / "bm25")


def test_bad_index_input_gets_typed_errors() -> None:
    with pytest.raises(DuplicateChunkIdError, match="'a' appears twice"):
        BM25Index(["a", "a"], ["one", "two"])
    with pytest.raises(InvalidInputError, match="differ in length"):
        BM25Index(["a"], ["one", "two"])


def test_matches_bm25s_rankings() -> None:
    bm25s = pytest.importorskip("bm25s")
    from ctx_retrieval.evaluation import load_cookbook

    corpus = load_cookbook()
    chunks = corpus.chunks[:300]
    ours = BM25Index([c.id for c in chunks], [c.text for c in chunks])
    theirs = bm25s.BM25()
    theirs.index([tokenize(c.text) for c in chunks], show_progress=False)
    for query in corpus.queries[:20]:
        tokens = tokenize(query.query)
        if not tokens:
            continue
        docs, _ = theirs.retrieve([tokens], k=5, show_progress=False)
        expected = [chunks[i].id for i in docs[0]]
        got = [cid for cid, _ in ours.search(query.query, 5)]
        assert got == expected[: len(got)]


def test_rrf_formula_weights_and_dedupe() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["b", "d", "b"]], rrf_k=60)
    scores = dict(fused)
    assert scores["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert scores["a"] == pytest.approx(1 / 61) and scores["d"] == pytest.approx(1 / 62)
    assert [i for i, _ in fused][:2] == ["b", "a"]
    weighted = dict(reciprocal_rank_fusion([["a"], ["b"]], weights=[2.0, 1.0]))
    assert weighted["a"] == pytest.approx(2 / (DEFAULT_RRF_K + 1))
    assert [i for i, _ in reciprocal_rank_fusion([["x", "y"], ["y", "x"]])] == ["x", "y"]  # ties: first seen
    assert len(reciprocal_rank_fusion([["a", "b", "c"]], limit=2)) == 2
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([["a"]], weights=[1.0, 2.0])


# -- issue 25: scripts without spaces, accents ---------------------------------------------------------------

CJK_CHUNKS = {
    "zh-acme-1": "华信科技2023年第二季度报告。本季度营收同比增长百分之三，达到十二亿元。",
    "zh-acme-2": "截至六月底，公司员工总数为一千二百人，研发人员占四成。",
    "zh-bolt-1": "东岳重工2023年第二季度报告。本季度营收下降百分之五，订单减少。",
    "ja-1": "当社の第2四半期の売上高は前年同期比で3%増加しました。",
    "ja-2": "従業員数は六月末時点で千二百名です。",
    "ko-1": "삼성전자의 2분기 매출은 전년 대비 3% 증가했다.",
}


@pytest.mark.parametrize(("query", "expected"), [
    ("员工总数", "zh-acme-2"), ("华信科技 营收", "zh-acme-1"), ("东岳重工的订单", "zh-bolt-1"),
    ("売上高", "ja-1"), ("従業員数", "ja-2"), ("매출", "ko-1"),
])
def test_chinese_japanese_and_korean_queries_match_inside_unspaced_text(query: str, expected: str) -> None:
    from ctx_retrieval import BM25Entry, BM25Store

    ids, texts = list(CJK_CHUNKS), list(CJK_CHUNKS.values())
    assert BM25Index(ids, texts).search(query, 1)[0][0] == expected
    store = BM25Store()
    store.upsert(BM25Entry(i, t) for i, t in zip(ids, texts, strict=True))
    assert store.search(query, 1).entries()[0].id == expected
    assert BM25Index(ids, texts, tokenizer="parts").search(query, 1) == []  # a CJK run as one token: no match


def test_folded_tokens_match_queries_typed_without_diacritics() -> None:
    texts = ["Tổng doanh thu quý hai của Công ty Đông Á tăng 3%.", "Die Mitarbeiterzahl in Köln stieg.",
             "Cộng đồng tổng hợp"]
    ids = ["vi", "de", "vi-other"]
    default, folded = BM25Index(ids, texts), BM25Index(ids, texts, tokenizer="folded")
    parts = BM25Index(ids, texts, tokenizer="parts")
    for query, expected in (("quy tang", "vi"), ("Koln", "de")):
        assert folded.search(query, 1)[0][0] == expected
        assert default.search(query, 1)[0][0] == expected  # the default keeps each word and its folded form
        assert parts.search(query, 1) == []  # without folding, the accented words do not match
    assert folded.search("Tổng doanh thu", 1)[0][0] == "vi"  # with accents too: query and index folded alike
    # "cong" is also the folded "cộng": typed with its accents, "công" ranks the exact word first by default;
    # folding everything scores both alike
    assert [i for i, _ in default.search("Công", 2)] == ["vi", "vi-other"]
    found = dict(default.search("Công", 2))
    assert found["vi"] > found["vi-other"]
    assert tokenize("Grüße aus Köln") == ["grüße", "grusse", "gruss", "aus", "köln", "koln"]  # German stems too


def test_letters_keep_their_combining_marks_and_rtl_and_turkish_fold() -> None:
    # Devanagari, Bengali, Tamil: a vowel sign is part of its letter's word (it split at every one before)
    # (each word is followed by its Snowball stem where it has one: Hindi, Tamil; Bengali has no stemmer)
    assert tokenize("अपलोड की गई फ़ाइलें") == ["अपलोड", "की", "गई", "फ़ाइलें", "फ़ाइल"]  # words under 4 letters whole
    assert tokenize("डिपेंडेंसी कैश") == ["डिपेंडेंसी", "डिपेंडेंस", "कैश"]
    assert tokenize("বাংলা ভাষা") == ["বাংলা", "ভাষা"]
    assert {"தமிழ்", "மொழி"} <= set(tokenize("தமிழ் மொழி"))
    # Arabic with harakat, tatweel and hamza-carrying alefs meets Arabic typed without them; Hebrew points too
    assert tokenize("المُستخدِم") == ["المُستخدِم", "المستخدم", "مستخدم"]
    assert "احمد" in tokenize("أحمد") and "اخر" in tokenize("آخر") and "الي" in tokenize("إلى")
    assert tokenize("שָׁלוֹם") == ["שָׁלוֹם", "שלום"]
    # Turkish: dotless and dotted i fold to i, whatever the case
    assert "dosyalari" in tokenize("dosyaları") and "isik" in tokenize("IŞIK") and "isik" in tokenize("ışık")
    assert "istanbul" in tokenize("İstanbul")
    ids = ["hi", "ar", "tr"]
    texts = ["अपलोड की गई फ़ाइलें सर्वर पर सहेजी जाती हैं", "يحفظ الخادمُ ملفاتِ المُستخدِم", "Yüklenen dosyaları sunucu saklar"]
    index = BM25Index(ids, texts)
    for query, expected in (("फ़ाइलें", "hi"), ("ملفات المستخدم", "ar"), ("dosyalari", "tr")):
        assert index.search(query, 1)[0][0] == expected
    assert BM25Index(ids, texts, tokenizer="parts").search("फ़ाइलें", 3)[0][0] == "hi"  # parts: as before


def test_words_are_also_indexed_as_their_stems_in_the_language_their_script_or_text_names() -> None:
    # Cyrillic is stemmed as Russian; Latin-script words in the language of their text (function words, or letters
    # only it writes); English and text in ASCII alone are not stemmed, nor identifiers
    assert tokenize("заголовки запросов") == ["заголовки", "заголовк", "запросов", "запрос"]
    assert tokenize("Sertifikanın süresi") == ["sertifikanın", "sertifikanin", "sertifika", "süresi", "suresi",
                                               "süres", "sures"]
    assert tokenize("Die Abhängigkeiten und die Dateien")[-2:] == ["dateien", "datei"]
    assert tokenize("the headers of the requests") == ["the", "headers", "of", "the", "requests"]
    assert tokenize("Köln Dateien run_target2") == ["köln", "koln", "dateien", "datei", "run", "target2", "run_target2"]
    ids = ["ru", "tr", "de", "en"]
    texts = ["Сервер возвращает заголовки запросов в ответе.", "Yüklenen sertifikanın süresi dolunca sunucu durur.",
             "Das Werkzeug lädt die Abhängigkeiten und speichert sie im Zwischenspeicher.",
             "The server returns the headers of every request."]
    index = BM25Index(ids, texts)
    for query, expected in (("заголовок запроса", "ru"), ("sertifika süresi", "tr"), ("Abhängigkeit laden", "de")):
        assert index.search(query, 1)[0][0] == expected, query
    assert BM25Index(ids, texts, tokenizer="parts").search("sertifika", 1) == []  # without stems: no match
    # an exact form ranks above a relative: it matches the word and its stem
    exact = BM25Index(["a", "b"], ["Сервер возвращает заголовки.", "Сервер возвращает заголовков."])
    assert exact.search("заголовки", 2)[0][0] == "a"


def test_latin_language_reads_function_words_then_letters_only_some_languages_write() -> None:
    from ctx_retrieval.language import latin_language

    assert latin_language("Die Mitarbeiterzahl der Nordwerk AG in Köln stieg und ist nicht klein.") == "german"
    assert latin_language("Abhängigkeiten cachen") == "german"
    assert latin_language("dosyaları nasıl yüklerim") == "turkish"
    assert latin_language("¿Cómo instalo las dependencias?") == "spanish"
    assert latin_language("Comment installer les dépendances") == "french"
    assert latin_language("The café is open and the menu is in the window") is None
    assert latin_language("Wie viele Mitarbeiter") is None  # ASCII alone: not stemmed
    assert latin_language("Tổng doanh thu quý hai") is None  # Vietnamese: no stemmer
    assert latin_language("заголовки") is None  # another script: its own stemmer
    assert latin_language("Você aprenderá como usá-las para configuração da aplicação, e é também simples.") == \
        "portuguese"
    # a page mostly in another script, with URLs and a name in Portuguese: not stemmed as Portuguese
    page = "将应用部署到云端服务器，配置域名与证书，然后在圣保罗的数据中心运行并监控它的状态。" * 3
    assert latin_language(page + " fastapicloud.com, São Paulo") is None


def test_thai_queries_match_inside_unspaced_text_by_default_and_with_the_segmenter() -> None:
    texts = ["ยอดขายไตรมาสที่สองของบริษัทเพิ่มขึ้นร้อยละสาม", "จำนวนพนักงานของบริษัทเพิ่มเป็นหนึ่งพันสองร้อยคน"]
    ids = ["sales", "staff"]
    for tokenizer in ("identifiers", "thai"):
        index = BM25Index(ids, texts, tokenizer=tokenizer)
        assert index.search("ยอดขาย", 1)[0][0] == "sales", tokenizer
        assert index.search("พนักงานกี่คน", 1)[0][0] == "staff", tokenizer
    assert BM25Index(ids, texts, tokenizer="parts").search("ยอดขาย", 1) == []  # the run cut at its vowel marks
    from ctx_retrieval.retrieval.bm25 import tokenize_thai

    assert tokenize_thai(texts[0])[:4] == ["ยอดขาย", "ไตรมาส", "ที่สอง", "ของ"]  # words, not letter pairs
    assert "ที่" in tokenize(texts[0])  # a letter keeps its vowel and tone marks
    from ctx_retrieval import BM25Entry, BM25Store

    store = BM25Store(tokenizer="thai")  # the store takes it by name, and records it
    store.upsert(BM25Entry(i, t) for i, t in zip(ids, texts, strict=True))
    assert store.search("ยอดขาย", 1).entries()[0].id == "sales"
