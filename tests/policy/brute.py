"""An independent reference for policy probabilities: its own parser, possible-world sums.

Shares no code with plguard.policy or ProbLog: it tokenises policy.pl itself, evaluates the
rules on numpy arrays of worlds (one row per world), and weights each world by the product of
its facts' probabilities.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import yaml

_TOKEN = re.compile(r"\s*(\\\+|:-|[a-z][A-Za-z0-9_]*|[(),;.])")


def _strip_comments(text: str) -> str:
    return "\n".join(line.split("%", 1)[0] for line in text.splitlines())


def _tokens(text: str) -> list[str]:
    out, pos, text = [], 0, text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"cannot tokenise at {text[pos:pos + 20]!r}")
        out.append(m.group(1))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


class RuleSet:
    """Rules as nested tuples: ('atom', n) | ('not', f) | ('and', fs) | ('or', fs)."""

    def __init__(self, pl_text: str) -> None:
        self.rules: dict[str, list] = {}
        self.queries: list[str] = []
        toks = _tokens(_strip_comments(pl_text))
        i = 0
        while i < len(toks):
            if toks[i] == "query":
                assert toks[i + 1] == "(" and toks[i + 3] == ")" and toks[i + 4] == "."
                self.queries.append(toks[i + 2])
                i += 5
                continue
            head = toks[i]
            assert toks[i + 1] == ":-", toks[i:i + 3]
            body, i = self._disj(toks, i + 2)
            assert toks[i] == ".", toks[i:i + 3]
            self.rules.setdefault(head, []).append(body)
            i += 1

    def _disj(self, t, i):
        parts = []
        f, i = self._conj(t, i)
        parts.append(f)
        while t[i] == ";":
            f, i = self._conj(t, i + 1)
            parts.append(f)
        return (parts[0] if len(parts) == 1 else ("or", parts)), i

    def _conj(self, t, i):
        parts = []
        f, i = self._unary(t, i)
        parts.append(f)
        while t[i] == ",":
            f, i = self._unary(t, i + 1)
            parts.append(f)
        return (parts[0] if len(parts) == 1 else ("and", parts)), i

    def _unary(self, t, i):
        if t[i] == "\\+":
            f, i = self._unary(t, i + 1)
            return ("not", f), i
        if t[i] == "(":
            f, i = self._disj(t, i + 1)
            assert t[i] == ")"
            return f, i + 1
        if t[i] == "true":
            return ("const", True), i + 1
        if t[i] in ("fail", "false"):
            return ("const", False), i + 1
        return ("atom", t[i]), i + 1

    def support(self, name: str) -> set[str]:
        """The facts a head mentions, transitively."""
        if name not in self.rules:
            return {name}
        out: set[str] = set()
        stack = [b for b in self.rules[name]]
        while stack:
            f = stack.pop()
            if f[0] == "atom":
                out |= self.support(f[1])
            elif f[0] == "not":
                stack.append(f[1])
            elif f[0] in ("and", "or"):
                stack.extend(f[1])
        return out

    def truth(self, name: str, world: dict[str, np.ndarray], n: int) -> np.ndarray:
        """Boolean vector over worlds: is ``name`` derivable?"""
        memo: dict[str, np.ndarray] = {}

        def head(h):
            if h not in self.rules:
                return world[h]
            if h not in memo:
                v = np.zeros(n, dtype=bool)
                for b in self.rules[h]:
                    v = v | form(b)
                memo[h] = v
            return memo[h]

        def form(f):
            if f[0] == "atom":
                return head(f[1])
            if f[0] == "const":
                return np.full(n, f[1])
            if f[0] == "not":
                return ~form(f[1])
            vals = [form(g) for g in f[1]]
            out = vals[0].copy()
            for v in vals[1:]:
                out = (out & v) if f[0] == "and" else (out | v)
            return out

        return head(name)


def bundle_rules(folder: Path) -> tuple[RuleSet, list[str]]:
    rs = RuleSet((folder / "policy.pl").read_text())
    data = yaml.safe_load((folder / "predicates.yaml").read_text())
    if isinstance(data, dict):
        data = data["predicates"]
    names = [d["name"] for d in data] if isinstance(data, list) else list(data)
    return rs, names


def brute_probability(rs: RuleSet, query: str, probs: dict[str, float],
                      free: list[str]) -> float:
    """P(query) by summing the weights of all 2^len(free) worlds over ``free``.

    Facts outside ``free`` must have probability 0 or 1 (they are fixed by conditioning).
    """
    n = 2 ** len(free)
    bits = np.array(list(itertools.product([False, True], repeat=len(free))), dtype=bool)
    bits = bits.reshape(n, len(free))
    weight = np.ones(n)
    world: dict[str, np.ndarray] = {}
    for j, f in enumerate(free):
        world[f] = bits[:, j]
        weight *= np.where(bits[:, j], probs[f], 1.0 - probs[f])
    for f in rs.support(query) - set(free):
        p = probs[f]
        assert p in (0.0, 1.0), f"{f} is not free, so it must be fixed at 0 or 1"
        world[f] = np.full(n, p == 1.0)
    return float(weight[rs.truth(query, world, n)].sum())
