"""The pure DP core: sampling, mechanisms, privacy events, accountants and calibration (MECHANISMS §A, §12).

Imports only numpy, scipy, prv_accountant, autodp and the standard library; never logs; every random draw
comes from a generator passed in (see ``rng.make_rng``).
"""
