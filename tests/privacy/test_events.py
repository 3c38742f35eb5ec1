"""Privacy events: validation, JSON round trip, registry."""

import dataclasses
import json

import pytest

from dpicl.privacy.accounting.events import (
    SubsampledGaussianEvent,
    UnsupportedEventError,
    event_from_dict,
    event_from_json,
)


def test_json_round_trip():
    e = SubsampledGaussianEvent(noise_multiplier=1.27, sampling_rate=400 / 14732, sensitivity=2.0, mechanism="esa")
    s = e.to_json()
    assert json.loads(s)["kind"] == "subsampled_gaussian"
    back = event_from_json(s)
    assert back == e and type(back) is SubsampledGaussianEvent
    assert event_from_dict(e.to_dict()) == e


def test_sigma_is_sensitivity_times_noise_multiplier():
    assert SubsampledGaussianEvent(0.75, 0.1, 2.0).sigma == pytest.approx(1.5)


def test_unknown_kind_raises():
    with pytest.raises(UnsupportedEventError):
        event_from_dict({"kind": "laplace_from_the_future", "scale": 1.0})
    with pytest.raises(UnsupportedEventError):
        event_from_json('{"noise_multiplier": 1.0}')


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(noise_multiplier=0.0, sampling_rate=0.1, sensitivity=1.0),
        dict(noise_multiplier=-1.0, sampling_rate=0.1, sensitivity=1.0),
        dict(noise_multiplier=float("nan"), sampling_rate=0.1, sensitivity=1.0),
        dict(noise_multiplier=1.0, sampling_rate=0.0, sensitivity=1.0),
        dict(noise_multiplier=1.0, sampling_rate=1.5, sensitivity=1.0),
        dict(noise_multiplier=1.0, sampling_rate=0.1, sensitivity=0.0),
        dict(noise_multiplier=1.0, sampling_rate=0.1, sensitivity=float("inf")),
    ],
)
def test_validation(kwargs):
    with pytest.raises(ValueError):
        SubsampledGaussianEvent(**kwargs)


def test_events_are_frozen_and_hashable():
    e = SubsampledGaussianEvent(1.0, 1.0, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.noise_multiplier = 2.0  # type: ignore[misc]
    assert len({e, SubsampledGaussianEvent(1.0, 1.0, 1.0)}) == 1
