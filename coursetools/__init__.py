"""The course's build tools: what makes the products a class receives, beside the grader.

- ``release``: the learner's copy of the course (``make release``);
- ``answer_leaks``: the scan for an answer given away (a graded function with a body) in any file
  a learner reads: the release, the site and its downloads;
- ``gradescope``: one Gradescope autograder zip per exercise (``make autograder``), the grader
  packed with that exercise's hidden tests only.

``python -m coursetools release|autograder`` (``cli``, reached by ``__main__``) runs them (``python -m graders release|autograder``
does the same).  What they know of the exercises comes from ``course.catalogue``.  Nothing of
this package is shipped: the learner's copy and the autograders leave it out.
"""
