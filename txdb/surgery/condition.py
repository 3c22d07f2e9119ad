"""The ``--where`` condition: text that can only be one SQL expression
(``check_condition``), checked before SQLite parses it inside
``SELECT ... FROM <view> WHERE (<cond>)``."""

from __future__ import annotations

from txdb.errors import QueryError


def check_condition(cond: str) -> str:
    """The condition, stripped, if it can only be one SQL expression; else QueryError.

    Outside quoted strings/identifiers there may be no ``;``, no comment
    (``--``, ``/*``) and parentheses must balance without ever closing more
    than they opened, so ``WHERE (<cond>)`` cannot be escaped. SQLite itself
    then decides whether it is a valid expression.
    """
    if cond is None or not cond.strip():
        raise QueryError("--where: empty condition")
    s = cond.strip()
    depth = 0
    i, n = 0, len(s)
    closers = {"'": "'", '"': '"', "`": "`", "[": "]"}
    while i < n:
        c = s[i]
        if c in closers:
            end = closers[c]
            j = i + 1
            while True:
                j = s.find(end, j)
                if j < 0:
                    raise QueryError(f"--where: unterminated {c} quote")
                if end in "'\"`" and j + 1 < n and s[j + 1] == end:  # doubled quote
                    j += 2
                    continue
                break
            i = j + 1
            continue
        if c == ";":
            raise QueryError("--where takes one SQL condition, not statements (found ';')")
        if s.startswith("--", i) or s.startswith("/*", i):
            raise QueryError("--where: comments are not allowed in the condition")
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth < 0:
                raise QueryError("--where: unbalanced ')' in the condition")
        i += 1
    if depth:
        raise QueryError("--where: unbalanced '(' in the condition")
    return s
