"""Evaluation: privacy-utility sweeps and reports, and empirical privacy (membership-inference attacks, `mia`)."""
