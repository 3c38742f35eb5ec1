"""Test-wide settings: offline models, a throw-away PREFECT_HOME (set before Prefect is imported)."""

import os
import tempfile

os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="dpicl-test-prefect-")
os.environ.pop("PREFECT_API_URL", None)
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"] = "180"


def pytest_unconfigure(config):
    # Prefect stops its temporary server at interpreter exit and logs to streams pytest has closed by then;
    # without this the run ends with a harmless but alarming "--- Logging error ---" traceback.
    import logging

    logging.raiseExceptions = False
