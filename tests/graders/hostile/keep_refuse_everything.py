# Attack: raise Python's own ValueError on every call, so that every test of a refusal passes
# without computing anything.
def keep_positions(acc_scores, budget, n_sink, n_recent):
    raise ValueError("no")
