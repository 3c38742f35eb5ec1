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


def test_ptr_event_fields_defaults_and_json():
    from dpicl.privacy.accounting.events import SubsampledPTREvent

    e = SubsampledPTREvent(epsilon_em=0.9, noise_multiplier=1.869, delta0=1.823e-5, sampling_rate=400 / 14732)
    assert e.kind == "subsampled_ptr" and e.sensitivity == 2.0 and e.mechanism == "ksa_ptr"
    assert e.sigma == pytest.approx(3.738)
    assert e.failure_delta == pytest.approx(400 / 14732 * 1.823e-5)
    q, d0 = 400 / 14732, 1.823e-5
    assert e.amplified_rate == q / (1 - q * d0) > q  # sound: larger than q (paper 001 Thm 12: smaller)
    back = event_from_json(e.to_json())
    assert back == e and type(back) is SubsampledPTREvent
    assert json.loads(e.to_json())["delta0"] == 1.823e-5


@pytest.mark.parametrize(
    "bad",
    [
        dict(delta0=0.0), dict(delta0=1.0), dict(delta0=-1e-5), dict(delta0=float("nan")), dict(delta0=True),
        dict(epsilon_em=0.0), dict(epsilon_em=float("inf")), dict(noise_multiplier=-1.0),
        dict(sampling_rate=0.0), dict(sampling_rate=1.5), dict(sensitivity=0.0),
    ],
)
def test_ptr_event_validation(bad):
    from dpicl.privacy.accounting.events import SubsampledPTREvent

    with pytest.raises(ValueError):
        SubsampledPTREvent(**(dict(epsilon_em=0.9, noise_multiplier=1.0, delta0=1e-5, sampling_rate=0.1) | bad))
