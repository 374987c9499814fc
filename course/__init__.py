"""What every part of the course reads about its exercises and its notebooks.

- ``catalogue``: the exercises (name, chapter, title, the functions each grades, and where the
  engines implement an answer: its counterparts); the one list of graded names.
- ``notebooks``: a notebook's cells (their source text, the answer cell) and the test of a
  function that is still a starter (a body that is one ``raise NotImplementedError``).
- ``starters``: a function's source turned into its starter.

It holds no answer and no hidden test: the learner's copy and the Gradescope autograder ship it.
"""
