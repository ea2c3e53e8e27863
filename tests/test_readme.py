"""README.md is a front door: short, its two commands true, its workload table the registry's."""
from __future__ import annotations

import re
from pathlib import Path

from core.tools.readme_table import BEGIN, END, readme_block, workload_table
from core.workloads import WORKLOADS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COMMANDS = ("bash scripts/dashboard.sh", "bash scripts/test.sh")
DOCS = ("architecture.md", "cli.md", "contract.md", "dashboard.md", "results.md", "security.md",
        "CLUSTER.md", "CONTRACTS.md", "adding-a-workload.md", "multihost.md")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_at_most_200_lines():
    n = len(README.read_text().splitlines())
    assert n <= 200, f"README.md has {n} lines: move detail into docs/"


def test_the_readme_gives_the_two_commands_and_their_scripts_exist():
    text = README.read_text()
    for command in COMMANDS:
        assert f"```bash\n{command}\n```" in text, command
        assert (ROOT / command.split()[1]).is_file(), command


def test_the_readme_workload_table_is_the_generated_one():
    text = README.read_text()
    assert text.count(BEGIN) == 1 and text.count(END) == 1, "the table's markers are missing or repeated"
    held = text[text.index(BEGIN):text.index(END) + len(END)]
    assert held == readme_block(), ("README's workload table differs from the registry: paste "
                                    "`python -m core.tools.readme_table` into it")


def test_the_table_has_one_row_per_registered_workload():
    rows = workload_table().splitlines()[2:]
    assert [r.split("|")[1].strip() for r in rows] == [f"`{name}`" for name in WORKLOADS]


def test_the_readme_links_every_doc_and_each_link_resolves():
    text = README.read_text()
    for doc in DOCS:
        assert f"(docs/{doc})" in text, f"README does not link docs/{doc}"
    for path in [README, *(ROOT / "docs" / d for d in DOCS)]:
        for target in LINK.findall(path.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            resolved = (path.parent / target.split("#")[0]).resolve()
            assert resolved.exists(), f"{path.relative_to(ROOT)} links {target}, which does not exist"
