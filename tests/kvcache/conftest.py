"""Engine tests: transformers' models here are tiny, so torch runs on one thread.

Two thread pools in one process (numpy's BLAS and torch's OpenMP), each spinning while the other
works, can make alternating engine and transformers calls many times slower on a busy machine.
"""
import torch

torch.set_num_threads(1)
