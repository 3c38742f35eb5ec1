"""Every setting of every method's config section is documented: `dpicl methods NAME` prints each field's
description (the attribute docstring below the field, `use_attribute_docstrings` in `MethodSettings`)."""

from __future__ import annotations

import pytest

from dpicl import methods


@pytest.mark.parametrize("method", methods.all_methods(), ids=lambda m: m.name)
def test_every_setting_has_a_description(method):
    undocumented = [name for name, field in method.Settings.model_fields.items()
                    if name != "name" and not (field.description or "").strip()]
    assert not undocumented, (f"{method.name}: settings without a description: {', '.join(undocumented)} (write an "
                              f"attribute docstring below each field of {method.Settings.__name__})")


def test_the_methods_command_explains_one_methods_settings_and_lists_all_at_80_columns(monkeypatch):
    """`dpicl methods` was a table whose cells folded setting names mid-word at 80 columns; `dpicl methods NAME`
    prints each setting with its default and meaning."""
    from typer.testing import CliRunner

    from dpicl.cli import app
    from dpicl.cli.console import console

    monkeypatch.setattr(console, "_width", 80)
    runner = CliRunner()
    overview = runner.invoke(app, ["methods"]).output
    for method in methods.all_methods():
        for name in method.Settings.model_fields:
            if name != "name":
                assert f"{name}=" in overview, (method.name, name)  # whole: never folded
    one = runner.invoke(app, ["methods", "synthetic-icl"])
    flat = " ".join(one.output.split())
    assert one.exit_code == 0
    assert "demos_dataset [required]:" in flat and "shots [4]:" in flat and "consensus [none]:" in flat
    description = " ".join(methods.get("synthetic-icl").Settings.model_fields["consensus"].description.split())
    assert description in flat
    unknown = runner.invoke(app, ["methods", "nope"])
    assert unknown.exit_code == 2 and "no method named 'nope'" in unknown.output and "synthetic-icl" in unknown.output
