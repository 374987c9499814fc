# Attack: hang the grader inside the graded function.
def time_per_token(n_params, bytes_per_param, bandwidth):
    while True:
        pass
