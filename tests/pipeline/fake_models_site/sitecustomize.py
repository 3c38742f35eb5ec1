"""Fake models in *child* processes of the serve/concurrency tests (the `dpicl serve` process, the flow runs its
Runner starts, concurrent `answer_backlog` processes): put this folder and the repository root on PYTHONPATH and
set DPICL_TEST_FAKE_MODELS=1. When `dpicl.tasks.context` is imported, its `backend` and `encoder` are replaced by
the deterministic fakes of tests/pipeline/fakes.py, exactly as the `fake_models` fixture does in-process. Without
the variable this module does nothing."""

import os
import sys

if os.environ.get("DPICL_TEST_FAKE_MODELS") == "1":
    import importlib.abc
    import importlib.util

    class _PatchContext(importlib.abc.MetaPathFinder):
        target = "dpicl.tasks.context"

        def find_spec(self, name, path=None, target=None):
            if name != self.target:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(name)
            exec_module = spec.loader.exec_module

            def exec_and_patch(module):
                exec_module(module)
                from tests.pipeline.fakes import FakeBackend, FakeEncoder

                backend, encoder = FakeBackend(), FakeEncoder()
                module.backend = lambda cfg: backend
                module.encoder = lambda cfg: encoder

            spec.loader.exec_module = exec_and_patch
            return spec

    sys.meta_path.insert(0, _PatchContext())
