"""Contexts in the document's language: the prompt each document gets, its cache key, and the twin's answers."""

from __future__ import annotations

from typing import Any

from ctx_retrieval import DEFAULT_PROMPT, ENGLISH_PROMPT, SourceDocument, split_into_chunks
from ctx_retrieval.chunking import split_by_tokens
from ctx_retrieval.tokens import estimate_tokens

INSTRUCTION = "Write it in the language the document is written in."
ZH_TEXT = ("# 华信科技2023年第二季度报告\n\n华信科技是一家总部位于深圳的电子元件制造商，"
           "产品销往三十多个国家和地区。\n\n"
           + "".join(f"第{n}部分：本季度营收同比增长百分之{n}，毛利率保持稳定，"
                     f"员工总数达到{n}千二百人，新工厂正式投产。\n\n" for n in range(1, 9)))
JA_TEXT = ("# 北斗精機 2023年度 第2四半期報告\n\n"
           + "".join(f"第{n}節：当四半期の売上高は前期比{n}%増加し、従業員数は{n},200人となった。\n\n"
                     for n in range(1, 9)))
EN_TEXT = ("# ACME Corp Q2 2023 filing\n\n"
           + "".join(f"Section {n}: the company's revenue grew by {n}% over the previous quarter, and the number of "
                     f"employees reached {n},200.\n\n" for n in range(1, 9)))


def _doc(doc_id: str, text: str) -> tuple[SourceDocument, list[Any]]:
    document = SourceDocument(doc_id, text)
    return document, split_into_chunks(document, split_by_tokens(text, 60, estimate_tokens))


def test_each_document_is_asked_in_its_language_and_english_keeps_its_key(fake_server: Any,
                                                                          make_generator: Any) -> None:
    items = [_doc("zh", ZH_TEXT), _doc("ja", JA_TEXT), _doc("en", EN_TEXT)]
    results = make_generator().contextualize_many(items)
    asked = {r.chunk_text: INSTRUCTION in r.body["messages"][-1]["content"][-1]["text"]
             for r in fake_server.successful()}
    for document, chunks in items:
        assert all(asked[c.text.strip()] is (document.id != "en") for c in chunks if c.text.strip())
    versions = {r.document_id: r.prompt_version for r in results}
    assert versions == {"zh": "ctx-v1-lang", "ja": "ctx-v1-lang", "en": "ctx-v1"}
    # the twin answers in the chunk's script, well within max_tokens: nothing cut off, nothing retried
    by_doc = {d: [r.context for r in results if r.document_id == d] for d in versions}
    assert all("本段出自「华信科技" in c for c in by_doc["zh"])
    assert all("この部分は「北斗精機" in c for c in by_doc["ja"])
    assert all(c.startswith("This chunk is from") for c in by_doc["en"])
    assert all(r.status == "generated" for r in results)

    # The course prompt for every document: English chunks are read from the cache (same key), the others asked
    # again under the course's own key.
    fake_server.reset()
    again = make_generator(prompt=ENGLISH_PROMPT).contextualize_many(items)
    assert {r.document_id for r in again if r.status == "cached"} == {"en"}
    assert not any(INSTRUCTION in r.body["messages"][-1]["content"][-1]["text"] for r in fake_server.successful())
    assert {r.prompt_version for r in again} == {"ctx-v1"}


def test_the_twin_writes_no_retry_for_long_chinese_chunks(fake_server: Any, make_generator: Any) -> None:
    # a list of short lines, as reports and tables are: the old canned answer quoted 12 of them, 24 characters
    # each, and overran max_tokens
    lines = "".join(f"{n}. 华南地区第{n}个城市的销售网点数量持续增长并达到新的高点\n" for n in range(60))
    document = SourceDocument("zh-long", "# 华信科技2023年度报告：各城市销售网点一览表与年度经营情况说明\n\n" + lines)
    chunks = split_into_chunks(document, split_by_tokens(document.text, 400, estimate_tokens))
    generator = make_generator(prompt=DEFAULT_PROMPT)
    results = generator.contextualize(document, chunks)
    assert all(r.status == "generated" for r in results)
    assert generator.last_report.retries == 0 and generator.last_report.prompt_version == "ctx-v1-lang"
    assert all(r.body["max_tokens"] >= 150 for r in fake_server.successful())
    assert all(r.response_text and estimate_tokens(r.response_text) < 100 for r in fake_server.successful())


KO_TEXT = ("# 한빛전자 2023년 2분기 보고서\n\n"
           + "".join(f"제{n}절: 이번 분기 매출은 전 분기보다 {n}% 증가했으며 직원 수는 {n},200명이다.\n\n"
                     for n in range(1, 9)))
RU_TEXT = ("# «Северный Луч»: отчёт за второй квартал\n\n"
           + "".join(f"Раздел {n}: выручка компании выросла на {n} %, а численность сотрудников достигла {n} 200 "
                     "человек.\n\n" for n in range(1, 9)))
TR_TEXT = ("# Yıldız Elektronik ikinci çeyrek raporu\n\n"
           + "".join(f"Bölüm {n}: şirketin geliri bir önceki çeyreğe göre %{n} arttı ve çalışan sayısı {n}.200 kişiye "
                     "ulaştı.\n\n" for n in range(1, 9)))
HI_TEXT = ("# सूर्य इलेक्ट्रॉनिक्स दूसरी तिमाही की रिपोर्ट\n\n"
           + "".join(f"खंड {n}: कंपनी का राजस्व पिछली तिमाही से {n}% बढ़ा और कर्मचारियों की संख्या {n},200 हो गई।\n\n"
                     for n in range(1, 9)))


def test_the_document_language_prompt_gets_contexts_in_korean_russian_turkish_and_hindi(
        fake_server: Any, make_generator: Any) -> None:
    items = [_doc("ko", KO_TEXT), _doc("ru", RU_TEXT), _doc("tr", TR_TEXT), _doc("hi", HI_TEXT)]
    results = make_generator().contextualize_many(items)
    assert {r.prompt_version for r in results} == {"ctx-v1-lang"}  # none of them taken for English
    assert all(INSTRUCTION in r.body["messages"][-1]["content"][-1]["text"] for r in fake_server.successful())
    by_doc = {d: [r.context or "" for r in results if r.document_id == d] for d in ("ko", "ru", "tr", "hi")}
    assert all(c.startswith("이 부분은 「한빛전자") for c in by_doc["ko"])
    assert all(c.startswith("Этот фрагмент из документа ««Северный Луч»") for c in by_doc["ru"])
    assert all(c.startswith("Bu bölüm «Yıldız Elektronik") for c in by_doc["tr"])
    assert all(c.startswith("यह अंश «सूर्य इलेक्ट्रॉनिक्स") for c in by_doc["hi"])
    assert all(r.status == "generated" for r in results)
