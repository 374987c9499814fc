# Attack: a list of tokens that says it equals anything (==, !=, len, iteration that stops at
# what a check compares), so that a check comparing it the way the learner's own code would is
# fooled.
import numpy as np


class LiarTokens(list):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __len__(self):
        return 1


def speculative_accept(draft_tokens, q_probs, p_probs, uniforms):
    return LiarTokens([0])
