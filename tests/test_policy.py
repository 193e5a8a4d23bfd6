"""One policy: no verdict literal or verdict set outside ``checks/`` (issue 28), and the policy's
table answers every verdict for every job."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agentdb.checks import policy
from agentdb.results import OK, VERDICTS, Finding, SessionCheck

SRC = Path(__file__).resolve().parents[1] / "src" / "agentdb"
NAMES = {OK, *VERDICTS}


def _mentions_verdict(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and "verdict" in n.id.lower():
            return True
        if isinstance(n, ast.Attribute) and "verdict" in n.attr.lower():
            return True
    return False


def _verdict_strings(node: ast.AST) -> list[str]:
    return [
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in NAMES
    ]


def offenders(source: str) -> list[tuple[int, str]]:
    """(line, text) of each verdict literal a module decides by: compared with something named
    like a verdict, or two or more distinct verdict names gathered in a set, tuple or list that
    is a constant of its own (assigned, or given to ``frozenset``/``set``). Identity kinds and
    job outcomes that share a word with a verdict (``ident.kind == "foreign"``, an outcome
    ``"corrupt"``) are not verdicts."""
    tree = ast.parse(source)
    parent: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parent[child] = node
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_mentions_verdict(s) for s in sides):
                lits = [v for s in sides for v in _verdict_strings(s)]
                if lits:
                    found.append((node.lineno, ", ".join(lits)))
        elif isinstance(node, ast.Set | ast.Tuple | ast.List):
            direct = {
                e.value
                for e in node.elts
                if isinstance(e, ast.Constant) and isinstance(e.value, str) and e.value in NAMES
            }
            up = parent.get(node)
            constant = isinstance(up, ast.Assign | ast.AnnAssign) or (
                isinstance(up, ast.Call)
                and isinstance(up.func, ast.Name)
                and up.func.id in ("frozenset", "set")
            )
            if len(direct) >= 2 and constant:
                found.append((node.lineno, ", ".join(sorted(direct))))
    return found


def test_no_verdict_literal_outside_checks() -> None:
    wrong = []
    for p in sorted(SRC.rglob("*.py")):
        rel = p.relative_to(SRC)
        if rel.parts[0] == "checks" or rel.name == "results.py":
            continue  # the policy's home, and the contract's list of verdicts
        for line, text in offenders(p.read_text()):
            wrong.append(f"{rel}:{line}: {text}")
    assert not wrong, "verdicts decided outside checks/ (ask checks.policy):\n" + "\n".join(wrong)


def test_the_literal_finder_can_fail() -> None:
    assert offenders('if r.verdict == "corrupt": pass')
    assert offenders('USABLE = ("ok", "needs_migration")')
    assert not offenders('item.outcome = "corrupt"')
    assert not offenders('if ident.kind in ("foreign", "too_new"): pass')
    assert offenders('DAMAGED = frozenset({"corrupt", "unreadable"})')


def _result(verdict: str, *codes: str, status: str | None = "completed") -> SessionCheck:
    findings = [Finding(c, f"x.sqlite: {c}", "error") for c in codes]
    return SessionCheck(
        "01J00000000000000000000000", Path("/s/x.sqlite"), verdict, status=status, findings=findings
    )  # type: ignore[arg-type]


@pytest.mark.parametrize("verdict", [OK, *VERDICTS])
@pytest.mark.parametrize("job", ["recover", "migrate", "backup", "restore", "prune", "end", "read"])
def test_every_verdict_has_an_answer_for_every_job(verdict: str, job: policy.Job) -> None:
    d = policy.decide(job, _result(verdict))
    assert isinstance(d, policy.Act | policy.Skip | policy.Refuse)
    if isinstance(d, policy.Refuse):
        assert d.message
        # a refusal never names the refusing job as the way forward
        if d.fix is not None and d.fix.command is not None:
            assert policy.decide_for_command(d.fix.command, _result(verdict)) != "refuse"


def test_fix_for_ok_is_none_and_every_other_verdict_has_one() -> None:
    assert policy.fix_for(_result(OK)) is None
    for v in VERDICTS:
        assert policy.fix_for(_result(v)) is not None, v


def test_lifecycle_only_inconsistency_is_ended_not_pruned() -> None:
    fix = policy.fix_for(_result("inconsistent", "bad_status", status="zombie"))
    assert fix is not None and fix.command is not None and " sessions end " in f" {fix.command}"
    other = policy.fix_for(_result("inconsistent", "bad_kind"))
    assert other is not None and other.final
