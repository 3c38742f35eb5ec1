"""Every document the code and the docs cite is in the repository: `docs/*.md` paths, and the sections and §12.1
items of docs/MECHANISMS.md that `MECHANISMS §…` (or a bare `§…` in the privacy core) names."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [*ROOT.glob("dpicl/**/*.py"), *ROOT.glob("benchmarks/*.py"), *ROOT.glob("scripts/*.py"),
           *ROOT.glob("tests/**/*.py"), *ROOT.glob("docs/**/*.md"), ROOT / "README.md", *ROOT.glob("dpicl/**/*.yaml")]
MECHANISMS = ROOT / "docs" / "MECHANISMS.md"


def texts():
    for path in SOURCES:
        yield path, path.read_text(encoding="utf-8")


def mechanisms_sections() -> tuple[set[str], set[int]]:
    text = MECHANISMS.read_text(encoding="utf-8")
    sections = set(re.findall(r"^#{2,3} ([0-9A-Z]+(?:\.[0-9]+)?)\.? ", text, flags=re.M))
    part = text.split("### 12.1", 1)[1].split("### 12.2", 1)[0]
    items = {int(n) for n in re.findall(r"^(\d+)\. ", part, flags=re.M)}
    return sections, items


def test_cited_docs_exist():
    missing = []
    for path, text in texts():
        for cited in re.findall(r"\bdocs/[\w/.-]+\.md\b", text):
            if not (ROOT / cited).exists():
                missing.append(f"{path.relative_to(ROOT)}: {cited}")
    assert not missing, missing


def test_no_document_outside_the_repository_is_cited():
    outside = [f"{path.relative_to(ROOT)}: {m}" for path, text in texts()
               for m in re.findall(r"\.\./shared\b|\bDESIGN\.md\b", text) if path.name != Path(__file__).name]
    assert not outside, outside


def test_every_cited_mechanisms_section_and_item_exists():
    sections, items = mechanisms_sections()
    assert {"A.1", "A.2", "A.3", "11.1", "12.1", "13"} <= sections and items == set(range(1, max(items) + 1))
    bad = []
    for path, text in texts():
        mechanisms_cited = "MECHANISMS" in text or "dpicl/privacy" in path.as_posix()
        if not mechanisms_cited or path == MECHANISMS:
            continue
        for ref in re.findall(r"MECHANISMS §([0-9A-Z]+(?:\.[0-9]+)?)", text):
            if ref.rstrip(".") not in sections:
                bad.append(f"{path.relative_to(ROOT)}: §{ref}")
        for group in re.findall(r"§12\.1 items? ([0-9–, and]+)", text):
            for n in re.findall(r"\d+", group):
                if int(n) not in items:
                    bad.append(f"{path.relative_to(ROOT)}: §12.1 item {n}")
    assert not bad, bad
