"""Find, read and validate policy bundles.

A bundle is a folder with ``policy.md`` (the natural-language policy), ``predicates.yaml``
(what the grounding model is asked), ``policy.pl`` (ProbLog rules and queries only) and,
optionally, ``cases.yaml`` (expected outcomes) and ``categories.yaml`` (the hazard category
codes of each unsafe rule, :mod:`plguard.categories`). Every problem becomes a
:class:`~plguard.errors.PolicyError` with file:line:col and the offending name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from plguard.categories import CODES, in_order, is_code
from plguard.errors import PolicyError, did_you_mean
from plguard.policy.core import Policy, rule_kind
from plguard.policy.located_yaml import LocDict, LocList, load_yaml, pos_of
from plguard.policy.syntax import Program, atoms, is_identifier, parse_program
from plguard.types import Example, PredicateSpec
from plguard.windows import WINDOW_RULES

REQUIRED_FILES = ("policy.md", "predicates.yaml", "policy.pl")
SCOPES = ("request", "response")
_FIELDS = ("name", "scope", "question", "description", "paraphrases", "prior", "examples",
           "windows")


def bundle_dirs() -> list[Path]:
    """Where bundled policies live: inside an installed wheel, then the source checkout."""
    # The package folder from this file's place (plguard/policy/bundle.py), not from
    # `import plguard`, which would make the package's top import this module's parent.
    pkg = Path(__file__).resolve().parent.parent
    return [d for d in (pkg / "_bundles", pkg.parent / "policies") if d.is_dir()]


def bundle_names() -> list[str]:
    """Names of the bundled policies."""
    names: set[str] = set()
    for d in bundle_dirs():
        names.update(p.name for p in d.iterdir() if (p / "policy.pl").is_file())
    return sorted(names)


def resolve_bundle(name_or_path: str | Path) -> Path:
    """The folder of a bundle given by bundled name or by path."""
    p = Path(name_or_path).expanduser()
    text = str(name_or_path)
    # A bare name means a bundled policy, even if the current folder has one of that name.
    if isinstance(name_or_path, str) and "/" not in text and "\\" not in text \
            and text not in (".", ".."):
        for d in bundle_dirs():
            if (d / text / "policy.pl").is_file():
                return d / text
    if p.is_dir():
        return p
    known = bundle_names()
    raise PolicyError(
        f"policy '{text}' not found: not a folder and not a bundled policy"
        f"{did_you_mean(text, known)}. Bundled policies: {', '.join(known) or 'none'}",
        file=str(p) if p.suffix or "/" in text else None, name=text)


def load_policy(name_or_path: str | Path, *, backend: str = "auto") -> Policy:
    """Load and validate a bundle (its program is compiled lazily, once).

    Args:
        name_or_path: a bundled policy name (see :func:`bundle_names`) or a bundle folder.
        backend: knowledge compiler: ``auto`` (SDD, else d-DNNF), ``sdd`` or ``ddnnf``.

    Raises:
        PolicyError: the bundle is missing, malformed or inconsistent.
    """
    from plguard.policy.cases import Case, load_cases

    folder = resolve_bundle(name_or_path)
    for fname in REQUIRED_FILES:
        if not (folder / fname).is_file():
            raise PolicyError(f"bundle is missing {fname} (a bundle needs "
                              f"{', '.join(REQUIRED_FILES)}; cases.yaml is optional)",
                              file=str(folder / fname), name=fname)
    text = (folder / "policy.md").read_text(encoding="utf-8")
    predicates, priors, positions = parse_predicates(folder / "predicates.yaml")
    pl_file = folder / "policy.pl"
    user_program = pl_file.read_text(encoding="utf-8")
    program = parse_program(user_program, str(pl_file))
    validate_program(program, predicates, str(pl_file))
    cases_file = folder / "cases.yaml"
    cases: tuple[Case, ...] = ()
    if cases_file.is_file():
        cases = load_cases(cases_file, [p.name for p in predicates],
                           [q.name for q in program.queries])
    categories: dict[str, tuple[str, ...]] = {}
    if (folder / "categories.yaml").is_file():
        categories = parse_categories(folder / "categories.yaml", program)
    return Policy(name=folder.resolve().name, path=folder, text=text, predicates=predicates,
                  priors=priors, program=program, user_program=user_program, cases=cases,
                  predicate_pos=positions, backend=backend, categories=categories)


def parse_categories(path: Path, program: Program) -> dict[str, tuple[str, ...]]:
    """Read categories.yaml: each unsafe rule -> a category code or a list of codes.

    The unsafe rules are the queried ``unsafe_compliance_*`` rules, or
    ``unsafe_compliance`` in a policy without such rules, and the ``unsafe_content_*``
    rules (an answer's content, whatever the request).

    Returns:
        Rule -> its codes in taxonomy order, in file order of the rules.
    """
    file = str(path)
    data = load_yaml(path)
    if data is None:
        return {}
    if not isinstance(data, LocDict):
        raise PolicyError("categories.yaml must map unsafe rules to category codes, e.g. "
                          "'unsafe_compliance_violence: [S1]'", file=file, line=1, col=1)
    queries = [q.name for q in program.queries]
    rules = ([q for q in queries if rule_kind(q) == "unsafe"] or
             [q for q in queries if q == "unsafe_compliance"])
    rules += [q for q in queries if rule_kind(q) == "content"]
    out: dict[str, tuple[str, ...]] = {}
    for rule, value in data.items():
        line, col = data.pos(rule)
        if rule not in rules:
            why = ("it is not a query of policy.pl" if rule not in queries else
                   "it is not an unsafe-compliance rule (categories name what an unsafe "
                   "answer is hazardous for)")
            raise PolicyError(f"'{rule}' in categories.yaml: {why}"
                              f"{did_you_mean(str(rule), rules)}", file=file, line=line,
                              col=col, name=str(rule))
        codes = value if isinstance(value, list) else [value]
        if not codes:
            raise PolicyError(f"'{rule}' in categories.yaml lists no codes; give at least "
                              "one (or leave the rule out)", file=file, line=line, col=col,
                              name=str(rule))
        item_pos = getattr(value, "item_pos", None)
        for i, code in enumerate(codes):
            if not is_code(code):
                cl, cc = item_pos[i] if item_pos else (line, col)
                hint = did_you_mean(str(code).upper() if isinstance(code, str) else str(code),
                                    CODES)
                raise PolicyError(f"unknown category code {code!r} for '{rule}' in "
                                  f"categories.yaml{hint}; codes are {', '.join(CODES)}",
                                  file=file, line=cl, col=cc, name=str(code))
        out[str(rule)] = in_order(codes)
    return out


def parse_predicates(
    path: Path,
) -> tuple[tuple[PredicateSpec, ...], dict[str, float], dict[str, tuple[int, int]]]:
    """Read predicates.yaml: a list of entries, or ``predicates:`` as a list or mapping.

    Returns:
        The specs, the declared priors, and each predicate's (line, col) in the file.
    """
    file = str(path)
    data = load_yaml(path)
    if isinstance(data, dict) and set(data) == {"predicates"}:
        data = data["predicates"]
    entries: list[tuple[Any, Any, Any]] = []  # (entry, container, key) for positions
    if isinstance(data, LocList):
        entries = [(e, data, i) for i, e in enumerate(data)]
    elif isinstance(data, LocDict):
        for key, value in data.items():
            if value is None:
                value = LocDict()
                value.key_pos = {}
            if isinstance(value, LocDict) and "name" not in value:
                value["name"] = key
                value.key_pos.setdefault("name", data.pos(key))  # type: ignore[arg-type]
            entries.append((value, data, key))
    else:
        raise PolicyError("predicates.yaml must be a list of predicates (or 'predicates:' "
                          "holding a list or a mapping)", file=file, line=1, col=1)
    if not entries:
        raise PolicyError("predicates.yaml declares no predicates", file=file)
    specs: list[PredicateSpec] = []
    priors: dict[str, float] = {}
    seen: dict[str, int | None] = {}
    positions: dict[str, tuple[int, int]] = {}
    for entry, container, key in entries:
        line, col = pos_of(container, key)
        if not isinstance(entry, LocDict):
            raise PolicyError("each predicate must be a mapping with name, scope, question",
                              file=file, line=line, col=col)
        spec, prior = _predicate(entry, file)
        if spec.name in seen:
            nl, nc = entry.pos("name")
            raise PolicyError(f"duplicate predicate '{spec.name}' (first declared on line "
                              f"{seen[spec.name]})", file=file, line=nl, col=nc, name=spec.name)
        seen[spec.name] = entry.pos("name")[0]
        nl, nc = entry.pos("name")
        positions[spec.name] = (nl or 0, nc or 0)
        specs.append(spec)
        if prior is not None:
            priors[spec.name] = prior
    return tuple(specs), priors, positions


def _predicate(entry: LocDict, file: str) -> tuple[PredicateSpec, float | None]:
    def err(msg: str, key: str | None = None, name: str | None = None) -> PolicyError:
        line, col = entry.pos(key)
        return PolicyError(msg, file=file, line=line, col=col, name=name)

    for k in entry:
        if k not in _FIELDS:
            raise err(f"unknown field '{k}'{did_you_mean(str(k), _FIELDS)}; predicate fields "
                      f"are {', '.join(_FIELDS)}", k, str(k))
    name = entry.get("name")
    if not isinstance(name, str) or not is_identifier(name):
        raise err(f"predicate name {name!r} must be a lowercase identifier "
                  "(letters, digits, underscores)", "name", str(name))
    question = entry.get("question")
    if not isinstance(question, str) or not question.strip():
        raise err(f"predicate '{name}' needs a non-empty 'question' (the yes/no question put "
                  "to the grounding model)", "question" if "question" in entry else None, name)
    if "scope" not in entry:
        raise err(f"predicate '{name}' has a question but no scope: add 'scope: request' "
                  "(grounded from the request alone) or 'scope: response' (request and "
                  "response)", None, name)
    scope = entry["scope"]
    if scope not in SCOPES:
        raise err(f"predicate '{name}' has scope {scope!r}; use 'request' or 'response'"
                  f"{did_you_mean(str(scope), SCOPES)}", "scope", name)
    description = entry.get("description", "") or ""
    if not isinstance(description, str):
        raise err(f"description of '{name}' must be a string", "description", name)
    paraphrases = entry.get("paraphrases", []) or []
    if not isinstance(paraphrases, list) or not all(
            isinstance(x, str) and x.strip() for x in paraphrases):
        raise err(f"paraphrases of '{name}' must be a list of non-empty strings",
                  "paraphrases", name)
    prior = entry.get("prior")
    if prior is not None and (isinstance(prior, bool) or not isinstance(prior, int | float)
                              or not 0.0 <= float(prior) <= 1.0):
        raise err(f"prior of '{name}' must be a number in [0, 1], got {prior!r}", "prior", name)
    examples = _examples(entry, name, scope, err)
    windows = entry.get("windows")
    if windows is not None:
        if scope != "response":
            raise err(f"'windows' of '{name}' applies to response-scope predicates only (a "
                      "request is never split into windows)", "windows", name)
        if windows not in WINDOW_RULES:
            raise err(f"windows of '{name}' must be one of {', '.join(WINDOW_RULES)}, got "
                      f"{windows!r}{did_you_mean(str(windows), WINDOW_RULES)}", "windows", name)
    spec = PredicateSpec(name=name, scope=scope, question=question.strip(),
                         description=" ".join(description.split()),
                         paraphrases=tuple(x.strip() for x in paraphrases),
                         examples=examples, windows=windows,
                         prior=None if prior is None else float(prior))
    return spec, None if prior is None else float(prior)


def _examples(entry: LocDict, name: str, scope: str,
              err: Callable[..., PolicyError]) -> tuple[Example, ...]:
    """A predicate's worked examples: request (and response, for response scope) + answer."""
    raw = entry.get("examples", []) or []
    if not isinstance(raw, list):
        raise err(f"examples of '{name}' must be a list of mappings with request, "
                  "answer (true/false) and, for response scope, response", "examples", name)
    keys = ("request", "response", "answer")
    out = []
    for i, ex in enumerate(raw):
        where = f"example {i + 1} of '{name}'"
        if not isinstance(ex, dict):
            raise err(f"{where} must be a mapping with {', '.join(keys)}", "examples", name)
        unknown = [k for k in ex if k not in keys]
        if unknown:
            raise err(f"{where}: unknown field '{unknown[0]}'"
                      f"{did_you_mean(str(unknown[0]), keys)}", "examples", name)
        req, resp, ans = ex.get("request"), ex.get("response"), ex.get("answer")
        if not isinstance(req, str) or not req.strip():
            raise err(f"{where} needs a non-empty 'request'", "examples", name)
        if not isinstance(ans, bool):
            raise err(f"{where} needs 'answer: true' or 'answer: false', got {ans!r}",
                      "examples", name)
        if scope == "response" and (not isinstance(resp, str) or not resp.strip()):
            raise err(f"{where} needs a non-empty 'response' (the predicate has response "
                      "scope)", "examples", name)
        if scope == "request" and resp is not None:
            raise err(f"{where} has a 'response' but the predicate has request scope (its "
                      "question sees the request only)", "examples", name)
        out.append(Example(request=req.strip(), answer=ans,
                           response=resp.strip() if isinstance(resp, str) else None))
    return tuple(out)


def validate_program(program: Program, predicates: tuple[PredicateSpec, ...], file: str) -> None:
    """Check names in the rules against the declared predicates and each other."""
    declared = {p.name for p in predicates}
    defs = program.definitions()
    for rule in program.rules:
        if rule.head in declared:
            raise PolicyError(f"'{rule.head}' is a grounded predicate (declared in "
                              "predicates.yaml) and cannot also be defined by a rule",
                              file=file, line=rule.line, col=rule.col, name=rule.head)
    known = sorted(declared | set(defs))
    for rule in program.rules:
        for a in atoms(rule.body):
            if a.name not in declared and a.name not in defs:
                raise PolicyError(f"'{a.name}' in the rule for '{rule.head}' is neither a "
                                  f"declared predicate nor a rule{did_you_mean(a.name, known)}",
                                  file=file, line=a.line, col=a.col, name=a.name)
    if not program.queries:
        raise PolicyError("policy.pl has no query(...) lines; query at least "
                          "unsafe_compliance", file=file)
    seen: set[str] = set()
    for q in program.queries:
        if q.name in seen:
            raise PolicyError(f"query '{q.name}' is declared twice", file=file, line=q.line,
                              col=q.col, name=q.name)
        seen.add(q.name)
        if q.name not in defs and q.name not in declared:
            raise PolicyError(f"query '{q.name}' has no definition (no rule has it as head)"
                              f"{did_you_mean(q.name, known)}", file=file, line=q.line,
                              col=q.col, name=q.name)
    _check_acyclic(program, file)


def _check_acyclic(program: Program, file: str) -> None:
    # Recursion through negation has no ProbLog semantics, and the symbolic tools assume
    # rules can be unfolded; policies never need recursion, so reject every cycle.
    defs = program.definitions()
    state: dict[str, int] = {}

    def visit(head: str, trail: list[str]) -> None:
        state[head] = 1
        for rule in defs[head]:
            for a in atoms(rule.body):
                if a.name not in defs:
                    continue
                if state.get(a.name) == 1:
                    cycle = " -> ".join([*trail[trail.index(a.name):], a.name])
                    raise PolicyError(f"rules are recursive ({cycle}); policies must not "
                                      "be recursive", file=file, line=a.line, col=a.col,
                                      name=a.name)
                if a.name not in state:
                    visit(a.name, [*trail, a.name])
        state[head] = 2

    for head in defs:
        if head not in state:
            visit(head, [head])
