"""The product and the lab, apart: no code of the product or of its test suite reaches into lab/
(by import, or by a path to a lab script), so `make test` never runs or needs the lab."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRODUCT = ["selfplay_core", "selfplay_study", "selfplay_cli", "flows", "tasks", "tests", "benchmarks",
           "tools"]
# These read lab/'s markdown as text (its links must resolve), never its code.
READS_LAB_DOCS = {"test_doc_links.py", "test_layout.py"}


def lab_references(path: Path) -> list[str]:
    source = path.read_text()
    found = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "lab"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] == "lab":
            found.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and re.fullmatch(r"lab(/[\w./-]*)?", node.value):
            found.append(repr(node.value))  # a path into lab/, e.g. ROOT / "lab" / "x.py"
    return found


def test_no_product_code_or_product_test_reaches_into_the_lab():
    offenders = {}
    for top in PRODUCT:
        for path in sorted((REPO / top).rglob("*.py")):
            if path.name in READS_LAB_DOCS:
                continue
            refs = lab_references(path)
            if refs:
                offenders[str(path.relative_to(REPO))] = refs
    assert offenders == {}


def test_the_check_sees_an_import_and_a_path(tmp_path):
    p = tmp_path / "x.py"
    p.write_text('import lab.goalpost_roles\nfrom lab.tests.run_script import run_lab_script\n'
                 'SCRIPT = ROOT / "lab" / "verdict_reeval.py"\nLABEL = "label"\n')
    assert lab_references(p) == ["lab.goalpost_roles", "lab.tests.run_script", "'lab'"]


def test_the_lab_holds_the_studies_and_benchmarks_only_product_benchmarks():
    assert (REPO / "lab" / "learning-studies.md").is_file()
    assert (REPO / "lab" / "learning_study_protocol.md").is_file()
    assert not list((REPO / "docs").glob("study-*.png"))
    # A product benchmark measures a part of the product; none of them is a study of the toy
    # world's learning (those import the toy world's oracle or run `selfplay study`).
    for path in (REPO / "benchmarks").glob("*.py"):
        text = path.read_text()
        assert "selfplay_study" not in text and "toyworld.oracle" not in text, path.name
