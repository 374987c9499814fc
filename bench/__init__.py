"""Benchmarks of the course's machinery: ``python -m bench`` (``make bench``) runs them all.

Each ``bench/bench_*.py`` module has a ``main()`` that measures something and prints what it
measured; ``bench/__main__.py`` runs them in name order.
"""
