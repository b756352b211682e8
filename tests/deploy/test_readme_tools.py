"""The README names every optional test tool (issue 44, item 5): each Debian package `.ci/run`
installs for the tests appears in the README's "Optional, and what skips without it" paragraph,
so a newcomer knows what the skips of a first run mean. It left out `prometheus` (promtool: 32
tests skip without it), `chromium`, `chromium-driver`, `patroni` and `etcd-server`."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_names_every_package_ci_installs_for_the_tests() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    (loop,) = re.findall(r"^for package in (.+); do$", ci, re.M)
    packages = loop.split()
    assert "prometheus" in packages
    readme = (ROOT / "README.md").read_text()
    start = readme.index("Optional, and what skips without it:")
    optional = readme[start : readme.index("\n\n", start)]
    named = set(re.findall(r"`([^`]+)`", optional))
    assert [p for p in packages if p not in named] == []
