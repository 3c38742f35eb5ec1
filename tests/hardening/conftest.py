"""The bad-input suite prints how many refusals it checked, per category (docs/RELIABILITY.md, "Bad input")."""


def pytest_terminal_summary(terminalreporter):
    from tests.hardening.badinput import TRIED

    if TRIED:
        per = ", ".join(f"{category} {count}" for category, count in sorted(TRIED.items()))
        terminalreporter.write_line(f"bad input: {sum(TRIED.values())} refusals checked ({per})")
