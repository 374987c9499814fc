"""Helpers for the chapter notebooks of the course: what a chapter needs besides the engine.

A chapter's visible code should teach; the plumbing lives here, out of the reader's way::

    from coursebook import setup, glue_all, table, matrix, vec, show_source

* ``setup()``: the course's figure style and numpy's print options, once per chapter (in the
  first, hidden, cell);
* ``glue_all(name=value, ...)``: glue many figures for the text at once (``{glue:text}`name```),
  and ``glue_prose(name=sentence, ...)`` for sentences (``{glue:md}`name```);
* ``table(rows, columns, formats)``: a real table (HTML on the site, Markdown and text too)
  instead of print-formatted columns; ``matrix(M)``: an array as a table;
* ``fields_table(items)``: dataclass instances as a table (a row per instance, or a row per field
  of one instance), never their repr;
* ``text_blocks([(label, text), ...])``: texts a model wrote (its replies) as labelled blocks
  that wrap at the text column;
* ``vec(x)``: a vector as text, "(0.7517, 1.5035)", for the prose;
* ``show_source(fn, start, end)``: an engine function's source, highlighted and wrapped to the
  text column, or only the lines the text discusses; it refuses any function an exercise grades
  (the course never shows an answer);
* ``rel_err``, and the words that describe a measured figure (``times_word``, ``relation_word``,
  ``growth_word``, ``against_prediction``; on a shared machine ``noise_times_word``, ``change_words``,
  ``against_its_prediction``, ``where_the_gap_is`` and ``quotient_gap``, which call a difference
  within ``NOISE`` noise), so that the text stays true on a slow or a busy
  machine; ``and_join`` lists items for a sentence ("1, 2, 3 and 5");
* ``coursebook.figures``: the chapters' diagrams of the engine (a batch's cache rows, a paged
  pool, a beam tree, GA-2's cycles by unit), and ``coursebook.widgets``: the controls that work on
  the site and in JupyterLab (chapter 3's calculator among them).

Importing this package imports neither numpy nor matplotlib: a chapter may limit numpy's
threads (``kvcache.blas.limit_blas_threads``) after importing it.
"""
from __future__ import annotations

from .display import (Table, TextBlocks, fields_table, graded_names, matrix, show_source, source, table,
                      text_blocks, vec)
from .glue import glue_all, glue_prose
from .numbers import (NOISE, against_its_prediction, against_prediction, and_join, change_words, growth_word,
                      noise_times_word, quotient_gap, rel_err, relation_word, times_word, where_the_gap_is,
                      within_noise)
from .style import setup

__all__ = ["setup", "glue_all", "glue_prose", "Table", "table", "fields_table", "matrix", "vec", "show_source",
           "source", "text_blocks", "TextBlocks", "graded_names", "rel_err", "times_word", "relation_word", "growth_word", "against_prediction", "and_join",
           "NOISE", "within_noise", "noise_times_word", "change_words", "against_its_prediction", "where_the_gap_is",
           "quotient_gap"]
