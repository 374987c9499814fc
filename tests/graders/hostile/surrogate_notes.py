# Attack: a correct answer whose import-failure note holds lone surrogates ("\udc80"), which once made
# the result's UTF-8 write raise: the grader failed (grader_error) and the correct answer got 0.
import numpy as np
import no_such_module_for_this_attack


def softmax(scores, _note=__grader_import_failures__.update(
        {"import no_such_module_for_this_attack": "ModuleNotFoundError: \udc80\udcff\ud800"})):
    s = np.asarray(scores, dtype=float)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
