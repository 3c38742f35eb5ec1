"""Run a benchmark's LLM generation on another machine (a GPU), and the rest here.

A utility run of SAMSum with 24 four-shot teachers, 100 dialogues and 3 repetitions is about 11,000 generations:
hours on a 2-core CPU, minutes on a GPU machine that cannot install the whole pipeline. Three steps:

    benchmarks/utility.py ... --record calls.json.xz      # here: every generate call, no generation
    python benchmarks/offload.py calls.json.xz answers.json.xz --device cuda   # there: torch + transformers only
    benchmarks/utility.py ... --replay answers.json.xz    # here: recorded calls answered from the file

Recording returns a placeholder for every answer, so it sees exactly the calls whose prompts do not depend on an
answer: the teachers', zero-shot, the sampled candidates, the ICL baselines (the benchmark's generator is seeded
per repetition and draws the teachers before any answer exists). Calls built from answers (KSA's keyword prompts)
miss on replay and run here. The other machine generates with the backend's plain batched path (outputs may then
differ in their last bits with the batch: a benchmark's answers are never released, so batch invariance, which
protects releases, is not needed there). A call is known by its prompts and parameters: calls that sample without
a seed and repeat exactly (ESA's candidates in each repetition) are generated once and replay the same samples.
Files are JSON, xz-compressed when the name ends in `.xz`. They hold private text (the teachers' prompts show
private demonstrations; their answers are teacher outputs): benchmark data only, and only to a machine allowed to
hold it (docs/PRIVACY.md, "Evaluation output is not private").
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import lzma
import time
from pathlib import Path

PLACEHOLDER = "A placeholder answer."


def call_key(prompts, params) -> str:
    """One generate call's identity: its prompts in order and its generation parameters."""
    body = json.dumps([list(prompts), dataclasses.asdict(params)], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def _open(path: Path, mode: str, xz: bool):
    return lzma.open(path, mode + "t") if xz else open(path, mode)


def write(path: Path, obj: dict) -> None:
    path = Path(path)
    tmp = path.with_name(path.name + ".partial")
    with _open(tmp, "w", path.suffix == ".xz") as f:
        json.dump(obj, f)
    tmp.replace(path)  # never a half-written file under the final name


def read(path: Path) -> dict:
    with _open(path, "r", Path(path).suffix == ".xz") as f:
        return json.load(f)


class RecordingBackend:
    """Records each distinct generate call and answers it with placeholders; `save` writes them with the model's
    backend options (what the other machine loads)."""

    def __init__(self, model_options: dict) -> None:
        self.model_options = model_options
        self.calls: dict[str, dict] = {}

    def generate(self, prompts, params, progress: bool = False) -> list[str]:
        self.calls.setdefault(call_key(prompts, params),
                              {"prompts": list(prompts), "params": dataclasses.asdict(params)})
        return [PLACEHOLDER] * len(prompts)

    def save(self, path: Path) -> None:
        write(path, {"model": self.model_options, "calls": self.calls})
        generations = sum(len(c["prompts"]) for c in self.calls.values())
        print(f"recorded {len(self.calls)} calls, {generations} generations: {path}", flush=True)

    def close(self) -> None:
        pass


class ReplayBackend:
    """The real backend, with the calls of an answers file answered from it."""

    def __init__(self, backend, path: Path) -> None:
        self._backend = backend
        self._answers = read(path)["answers"]
        self.hits = self.misses = 0

    def generate(self, prompts, params, progress: bool = False) -> list[str]:
        found = self._answers.get(call_key(prompts, params))
        if found is not None and len(found) == len(prompts):
            self.hits += 1
            return list(found)
        self.misses += 1
        return self._backend.generate(prompts, params, progress=progress)

    def __getattr__(self, name):
        return getattr(self._backend, name)


def generate_all(calls_path: Path, out: Path, device: str, batch_size: int) -> None:
    """Answer every recorded call with the recorded model on `device`, batched freely."""
    from dpicl.inference import load_backend
    from dpicl.inference.base import GenerationParams

    recorded = read(calls_path)
    options = {**recorded["model"], "device": device, "batch_invariant": False, "batch_size": batch_size}
    options.pop("parallel_prompts", None)
    options.pop("decode_rows", None)
    started = time.perf_counter()
    backend = load_backend("hf", **options)
    loaded = time.perf_counter()
    answers = {}
    calls = recorded["calls"]
    for i, (key, call) in enumerate(calls.items()):
        params = GenerationParams(**{**call["params"], "stop": tuple(call["params"]["stop"])})
        answers[key] = backend.generate(call["prompts"], params)
        seconds = time.perf_counter() - loaded
        generations = sum(len(a) for a in answers.values())
        # rewritten after every call: a run stopped at a time limit still leaves the calls it answered
        write(out, {"device": device, "model": options, "load_seconds": loaded - started,
                    "generate_seconds": seconds, "generations": generations, "answers": answers})
        print(f"call {i + 1}/{len(calls)}: {len(call['prompts'])} prompts, {seconds:.0f} s", flush=True)
    print(f"{generations} generations in {seconds:.0f} s (model loaded in {loaded - started:.0f} s): {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Answer the generate calls that benchmarks/utility.py --record "
                                                 "wrote, on this machine's device.")
    parser.add_argument("calls", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    generate_all(args.calls, args.out, args.device, args.batch_size)


if __name__ == "__main__":
    main()
