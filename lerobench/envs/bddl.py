"""A task's goal from its BDDL file, without importing LIBERO or robosuite (cheap enough for the driver).

LIBERO writes each task as a BDDL problem: ``(:objects ...)`` and ``(:fixtures ...)`` name what is in the scene
(``name1 name2 - type``), ``(:goal (And (On a b) (Open c)))`` is the conjunction ``env.check_success`` evaluates.
The privileged expert plans from this; the LIBERO backend lays the simulator's privileged state out by it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PREDICATES = ("on", "in", "open", "close", "turnon", "turnoff")
"""Goal predicates of the five LIBERO suites (counted over their 130 tasks: in 63, on 61, close 11, turnon 8,
open 7, turnoff 1); the LIBERO-PRO suites use the same ones."""


@dataclass(frozen=True)
class Condition:
    """One conjunct of a goal: ``(On akita_black_bowl_1 plate_1)`` is ``Condition("on", ("akita...", "plate_1"))``."""

    predicate: str
    args: tuple[str, ...]

    def __str__(self) -> str:
        return f"({self.predicate.capitalize()} {' '.join(self.args)})"


@dataclass(frozen=True)
class TaskGoal:
    """What a BDDL problem says the scene holds and what must hold at the end."""

    language: str
    objects: tuple[str, ...]
    """Movable objects, in file order."""
    fixtures: tuple[str, ...]
    """Fixtures (tables, cabinets, stoves), in file order."""
    goal: tuple[Condition, ...]

    @property
    def entities(self) -> tuple[str, ...]:
        """Objects then fixtures: the privileged state's entity order."""
        return self.objects + self.fixtures

    @property
    def regions(self) -> tuple[str, ...]:
        """Goal arguments that are neither objects nor fixtures (sites such as ``basket_1_contain_region``), once."""
        named = set(self.entities)
        return tuple(dict.fromkeys(a for c in self.goal for a in c.args if a not in named))

    def unsupported(self) -> list[Condition]:
        """Conditions whose predicate the expert has no skill for."""
        return [c for c in self.goal if c.predicate not in PREDICATES]


def _tokens(text: str) -> list[str]:
    text = re.sub(r";[^\n]*", "", text)
    return re.findall(r"\(|\)|[^\s()]+", text)


def _tree(tokens: list[str]) -> list[object]:
    stack: list[list[object]] = [[]]
    for tok in tokens:
        if tok == "(":
            stack.append([])
        elif tok == ")":
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(tok)
    return stack[0]


def _section(tree: list[object], key: str) -> list[object] | None:
    for node in tree:
        if isinstance(node, list):
            if node and node[0] == key:
                return node[1:]
            found = _section(node, key)
            if found is not None:
                return found
    return None


def _names(section: list[object] | None) -> tuple[str, ...]:
    """``a b - type c - type2`` -> (a, b, c)."""
    names: list[str] = []
    pending: list[str] = []
    skip = False
    for tok in section or []:
        if not isinstance(tok, str):
            continue
        if skip:
            skip = False
        elif tok == "-":
            names += pending
            pending = []
            skip = True
        else:
            pending.append(tok)
    return tuple(names + pending)


def _conditions(node: object) -> list[Condition]:
    if not isinstance(node, list) or not node:
        return []
    head = str(node[0]).lower()
    if head == "and":
        return [c for child in node[1:] for c in _conditions(child)]
    return [Condition(head, tuple(str(a) for a in node[1:]))]


def parse_bddl(text: str) -> TaskGoal:
    """Parse a BDDL problem's scene and goal (``ValueError`` naming what is missing)."""
    tree = _tree(_tokens(text))
    goal = _section(tree, ":goal")
    if not goal:
        raise ValueError("BDDL problem has no (:goal ...)")
    language = _section(tree, ":language")
    return TaskGoal(
        language=" ".join(str(t) for t in language or []),
        objects=_names(_section(tree, ":objects")),
        fixtures=_names(_section(tree, ":fixtures")),
        goal=tuple(c for node in goal for c in _conditions(node)),
    )


def read_bddl(path: str | Path) -> TaskGoal:
    """Parse the BDDL file at ``path``."""
    return parse_bddl(Path(path).read_text())
