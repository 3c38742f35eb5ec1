"""The models a process's tasks share (dpicl.tasks.context)."""

from __future__ import annotations

import threading
import time

from dpicl.config import EmbeddingConfig, load_config
from dpicl.tasks import context


def test_a_model_asked_for_by_several_threads_at_once_loads_once(monkeypatch):
    """Prefect runs tasks on worker threads, and the demo loads its models ahead on another: without the lock,
    each thread that asks during the first load would load a model of its own."""
    loads = []

    class SlowEncoder:
        def __init__(self, model, batch_size):
            loads.append(model)
            time.sleep(0.3)

    monkeypatch.setattr("dpicl.embeddings.encoder.Encoder", SlowEncoder)
    cfg = load_config("demo").model_copy(update={"embedding": EmbeddingConfig(model="slow-test-encoder")})
    got = []
    threads = [threading.Thread(target=lambda: got.append(context.encoder(cfg))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert loads == ["slow-test-encoder"]
    assert len(got) == 4 and all(encoder is got[0] for encoder in got)
