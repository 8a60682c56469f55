"""Reference applications of tomus.compute, each with a single-process reference answer
(``reference_*`` in its module) that tests and benchmarks compare against."""

from __future__ import annotations

from tomus.compute.apps.abrain import ABrainData, ABrainResult, abrain
from tomus.compute.apps.kmeans import KMeansResult, kmeans
from tomus.compute.apps.pagerank import PageRankResult, pagerank
from tomus.compute.apps.pca import PCAResult, pca
from tomus.compute.apps.text import (
    grep,
    most_frequent_words,
    most_frequent_words_classic,
    word_count,
)

__all__ = [
    "ABrainData",
    "ABrainResult",
    "KMeansResult",
    "PCAResult",
    "PageRankResult",
    "abrain",
    "grep",
    "kmeans",
    "most_frequent_words",
    "most_frequent_words_classic",
    "pagerank",
    "pca",
    "word_count",
]
