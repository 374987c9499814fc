"""SeriesExplorer: precomputed series over x, a slider, a choice, stacked bars and their sums.

The data is computed in Python, once, when the chapter runs; the browser only draws it (no
kernel needed on the site).  Each series has the same parts (say the matrix, DMA and vector
cycles of a program) at every x (say the context length L)::

    SeriesExplorer(
        x=range(1, 65),
        series={"cached": {"matrix": [...], "DMA": [...], "vector": [...]},
                "recompute": {"matrix": [...], "DMA": [...], "vector": [...]}},
        x_label="context length L", unit="cycles", ratio=("recompute", "cached"), value=32)

The widget shows, at the x the slider picks (trait ``value``) and for the series the choice
picks (trait ``choice``: a series' name, or ``ALL``):

* the step at x: one stacked bar per series (its parts at x), with a table of the numbers;
* the ratio of two series' totals (``ratio=(a, b)`` gives a / b), at x and summed up to x;
* the sum up to x: every part summed over the positions x' <= x (a generation that reaches
  context length x runs each step before it; list every step in ``x`` for that to hold);
* a line chart of each series' total over every x, with a mark at x.

The bars keep one scale while the slider moves (the largest total over all x), so they grow.
``at()``, ``generation()``, ``ratios()`` and ``summary()`` give in Python exactly what the
widget shows, for notebooks and for the tests that compare it with the page.
"""
from __future__ import annotations

import operator
from typing import Iterable, Mapping, Sequence

import traitlets

from .base import CourseWidget

__all__ = ["SeriesExplorer", "ALL", "PART_COLOURS", "SERIES_COLOURS"]

ALL = "all"
PART_COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#8172b3", "#937860", "#da8bc3", "#8c8c8c", "#ccb974"]
SERIES_COLOURS = ["#1b6ca8", "#c0392b", "#2e8b57", "#7d3c98", "#b9770e"]
_EXACT = 2**53          # JavaScript Numbers hold every integer below this


def _whole(value, where: str) -> int:
    """``value`` as an int: ints, numpy integers and whole floats are; anything else is refused."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool):
        raise ValueError(f"{where}: {value!r} is not a whole number (the widget draws counts)")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{where}: {value!r} is not a whole number (the widget draws counts)") from None


def _positions(x: Iterable[int]) -> list[int]:
    """The slider's positions: whole numbers, at least one, strictly increasing."""
    xs = [_whole(v, "x") for v in x]
    if not xs:
        raise ValueError("x is empty: the slider needs at least one position")
    if any(b <= a for a, b in zip(xs, xs[1:])):
        raise ValueError("x must increase strictly (it is the slider's scale)")
    return xs


def _series(series: Mapping[str, Mapping[str, Sequence[int]]], n: int) -> tuple[list, list, dict]:
    """(names, parts, {name: {part: column}}) of ``series``: every series has the same parts in
    the same order, each a column of ``n`` whole, non-negative numbers, and no series sums to
    2**53 or more."""
    if not series:
        raise ValueError("series is empty")
    names = [str(name) for name in series]
    if ALL in names:
        raise ValueError(f"{ALL!r} names the choice of every series; call a series something else")
    parts = [str(p) for p in next(iter(series.values()))]
    if not parts:
        raise ValueError("a series needs at least one part")
    values: dict[str, dict[str, list[int]]] = {}
    for name, by_part in series.items():
        if [str(p) for p in by_part] != parts:
            raise ValueError(f"series {name!r} has parts {list(by_part)}; every series needs {parts}, in order")
        values[str(name)] = {str(part): _column(name, part, column, n) for part, column in by_part.items()}
        if sum(sum(c) for c in values[str(name)].values()) >= _EXACT:
            raise ValueError(f"series {name!r}: its sum reaches 2**53, past what the browser's numbers hold exactly")
    return names, parts, values


def _column(name, part, column: Sequence[int], n: int) -> list[int]:
    """One part of one series: ``n`` whole, non-negative numbers."""
    column = [_whole(v, f"series {name!r}, part {part!r}") for v in column]
    if len(column) != n:
        raise ValueError(f"series {name!r}, part {part!r}: {len(column)} values for {n} positions of x")
    if any(v < 0 for v in column):
        raise ValueError(f"series {name!r}, part {part!r}: a negative value cannot be drawn as a bar")
    return column


class SeriesExplorer(CourseWidget):
    """Precomputed series over x: a slider over x, a choice of series, stacked bars of their
    parts at x, the ratio of two series, the sums up to x, and a line chart of the totals."""

    _module = "series.js"
    _repr_traits = ("value", "choice")

    value = traitlets.Int().tag(sync=True)
    choice = traitlets.Unicode(ALL).tag(sync=True)
    data = traitlets.Dict(read_only=True).tag(sync=True)

    def __init__(self, x: Iterable[int], series: Mapping[str, Mapping[str, Sequence[int]]], *,
                 value: int | None = None, choice: str = ALL, x_label: str = "x", unit: str = "",
                 ratio: tuple[str, str] | None = None, labels: Mapping[str, str] | None = None,
                 part_labels: Mapping[str, str] | None = None, colours: Mapping[str, str] | None = None,
                 all_label: str | None = None, step_title: str = "At {x_label} = {x}",
                 sum_title: str = "Summed over {x_label} = {first} ... {x}", cumulative: bool = True,
                 **kwargs):
        xs = _positions(x)
        names, parts, values = _series(series, len(xs))
        if ratio is not None:
            ratio = tuple(str(r) for r in ratio)
            if len(ratio) != 2 or any(r not in values for r in ratio):
                raise ValueError(f"ratio names two series of {names}, not {ratio!r}")
        labels = {n: str((labels or {}).get(n, n)) for n in names}
        part_labels = {p: str((part_labels or {}).get(p, p)) for p in parts}
        colours = dict(colours or {})
        part_colours = {p: colours.get(p, PART_COLOURS[i % len(PART_COLOURS)]) for i, p in enumerate(parts)}
        series_colours = {n: colours.get(n, SERIES_COLOURS[i % len(SERIES_COLOURS)]) for i, n in enumerate(names)}
        self._values = values
        self._xs = xs
        data = {
            "x": xs, "x_label": x_label, "unit": unit, "names": names, "labels": labels, "parts": parts,
            "part_labels": part_labels, "part_colours": part_colours, "series_colours": series_colours,
            "values": values, "ratio": list(ratio) if ratio else None,
            "all_label": all_label or ("both" if len(names) == 2 else "all"),
            "step_title": step_title, "sum_title": sum_title, "cumulative": bool(cumulative),
        }
        self._data = data
        super().__init__(value=xs[-1] if value is None else value, choice=choice, **kwargs)

    @traitlets.default("data")
    def _default_data(self) -> dict:
        return self._data

    @traitlets.validate("value")
    def _check_value(self, proposal):
        if proposal["value"] not in self._xs:
            raise traitlets.TraitError(f"value must be one of x ({self._xs[0]} ... {self._xs[-1]}), "
                                       f"not {proposal['value']!r}")
        return proposal["value"]

    @traitlets.validate("choice")
    def _check_choice(self, proposal):
        allowed = [*self._values, ALL]
        if proposal["value"] not in allowed:
            raise traitlets.TraitError(f"choice must be one of {allowed}, not {proposal['value']!r}")
        return proposal["value"]

    # -- what the widget shows -----------------------------------------------------------------
    def shown(self) -> list[str]:
        """The series drawn: the chosen one, or every one."""
        return list(self._values) if self.choice == ALL else [self.choice]

    def at(self, value: int | None = None) -> dict[str, dict[str, int]]:
        """{series: {part: value at x, ..., "total": sum}} for every series, at ``value``."""
        i = self._xs.index(self.value if value is None else value)
        out = {}
        for name, by_part in self._values.items():
            row = {part: column[i] for part, column in by_part.items()}
            row["total"] = sum(row.values())
            out[name] = row
        return out

    def generation(self, value: int | None = None) -> dict[str, dict[str, int]]:
        """As ``at``, each part summed over the positions x' <= ``value``."""
        i = self._xs.index(self.value if value is None else value)
        out = {}
        for name, by_part in self._values.items():
            row = {part: sum(column[: i + 1]) for part, column in by_part.items()}
            row["total"] = sum(row.values())
            out[name] = row
        return out

    def ratios(self, value: int | None = None) -> dict[str, float | None] | None:
        """{"step": a / b at x, "generation": a / b summed up to x} for ``ratio=(a, b)``; a
        ratio is None where b is 0."""
        if not self._data["ratio"]:
            return None
        a, b = self._data["ratio"]
        step, gen = self.at(value), self.generation(value)
        return {"step": step[a]["total"] / step[b]["total"] if step[b]["total"] else None,
                "generation": gen[a]["total"] / gen[b]["total"] if gen[b]["total"] else None}

    def summary(self) -> dict:
        """The widget's words and tables, as the page writes them (numbers with "," separators,
        ratios to two decimals): {"step": rows, "generation": rows, "ratio": {...} or None}; a
        row is [series label, part values..., total]."""
        unit = f" {self._data['unit']}" if self._data["unit"] else ""

        def rows(table):
            return [[self._data["labels"][n]] + [f"{table[n][p]:,}" for p in self._data["parts"]]
                    + [f"{table[n]['total']:,}{unit}"] for n in self.shown()]

        ratios = self.ratios()
        return {
            "step": rows(self.at()),
            "generation": rows(self.generation()) if self._data["cumulative"] else None,
            "ratio": None if ratios is None else {k: "n/a" if v is None else f"{v:,.2f}" for k, v in ratios.items()},
        }
