from tests.pipeline.conftest import fake_models  # noqa: F401 (the fixture, shared with the pipeline tests)
