"""The pure DP core: sampling, mechanisms, privacy events, accountants, calibration (MECHANISMS §A, §12) and the
shared root finder (``search``: bisection that returns the feasible end of its bracket).

Imports only numpy, scipy, prv_accountant, autodp and the standard library; never logs; every random draw
comes from a generator passed in (see ``rng.make_rng``).
"""
