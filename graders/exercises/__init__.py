"""The hidden tests, one module per exercise (see ``graders.registry``).

Each module defines ``EXERCISE`` and builds its tests with fixed seeds.  Its reference answers are
written here, independently: never imported from ``kvcache``, ``solutions/`` or ``public_checks``.
"""
