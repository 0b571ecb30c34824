"""CITELINE_LABEL_BOOST: how much a document's labels lift its chunks in weighted and dbsf fusion.

A team marks its trusted sources with a tag, a category or a scope; each selector of the setting
(``tag:<tag>``, ``category:<category>``, ``scope:<scope>``) gives the documents carrying that label a
boost in [0, 1], and a document gets the largest of its labels' boosts (never their sum: a document
labelled twice as trusted is not twice as trustworthy). A category selects the categories below it too,
as a category filter keeps them (docs/scopes.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from citeline.retrieve.filters import normalise_category

#: A version's labels as the boost reads them: its tags, its category (None: none) and its scopes.
Labels = tuple[tuple[str, ...], str | None, tuple[str, ...]]


@dataclass(frozen=True)
class LabelBoost:
    """The boost of each selected tag, category and scope (settings.label_boost, parsed)."""

    tags: Mapping[str, float]
    #: Normalised category paths, each with its boost.
    categories: tuple[tuple[str, float], ...]
    scopes: Mapping[str, float]

    @staticmethod
    def of(selectors: Mapping[str, float]) -> LabelBoost:
        """``selectors`` (the setting, whose keys the settings checked) parsed; kept per distinct map."""
        return _parsed(tuple(sorted(selectors.items())))

    def of_labels(self, labels: Labels) -> float:
        """The largest boost among ``labels``; 0 when none is selected."""
        tags, category, scopes = labels
        found = [self.tags.get(t, 0.0) for t in tags] + [self.scopes.get(s, 0.0) for s in scopes]
        if category:
            found += [b for path, b in self.categories if category == path or category.startswith(path + "/")]
        return max(found, default=0.0)

    def boosts(self, labels: Sequence[Labels]) -> NDArray[np.float64]:
        """Each candidate's boost, from its version's ``labels`` (computed once per distinct labels)."""
        known: dict[Labels, float] = {}
        return np.fromiter(
            (known[one] if one in known else known.setdefault(one, self.of_labels(one)) for one in labels),
            dtype=np.float64,
            count=len(labels),
        )


@lru_cache(maxsize=8)
def _parsed(items: tuple[tuple[str, float], ...]) -> LabelBoost:
    tags: dict[str, float] = {}
    categories: dict[str, float] = {}
    scopes: dict[str, float] = {}
    for key, boost in items:
        kind, _, name = key.partition(":")
        if kind == "tag":
            tags[name] = boost
        elif kind == "scope":
            scopes[name] = boost
        else:
            path = normalise_category(name)
            categories[path] = max(boost, categories.get(path, 0.0))
    return LabelBoost(tags, tuple(categories.items()), scopes)
