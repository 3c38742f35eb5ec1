"""What `private_demonstrations: nearest` pays once per dataset: every private record's input embedded alone (a
forward pass each, so a record's vector depends on that record only), next to the same texts in padded batches.

    .venv/bin/python benchmarks/record_embeddings.py [--records 400] [--json]

The texts are the first SAMSum training dialogues (`samsum-sga`'s private pool file under $DPICL_DATA), the
config's embedding model on one torch thread, as the pipeline's sample stage runs it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from dpicl.config import load_config
from dpicl.embeddings.encoder import Encoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cfg = load_config("samsum-sga")
    private = next(source for source in cfg.data if source.kind == "private")  # $DPICL_DATA/samsum/train.json
    rows = json.loads(Path(private.path).read_text(encoding="utf-8"))[:args.records]
    texts = [row[private.fields.input] for row in rows]
    encoder = Encoder(cfg.embedding.model, batch_size=cfg.embedding.batch_size, threads=1)
    encoder.encode(texts[:10])  # warm-up
    rates = {}
    for name, batched in (("alone", False), ("batched", True)):
        start = time.perf_counter()
        encoder.encode(texts, batched=batched)
        rates[name] = len(texts) / (time.perf_counter() - start)
    print(f"{len(texts)} SAMSum dialogues, {cfg.embedding.model}, one thread: embedded alone {rates['alone']:.1f}/s, "
          f"in padded batches of {cfg.embedding.batch_size} {rates['batched']:.1f}/s; 10^5 records alone: "
          f"{1e5 / rates['alone'] / 3600:.2f} h")
    if args.json:
        print(json.dumps({"records": len(texts), "per_second": rates, "hours_per_1e5_alone": 1e5 / rates["alone"]
                          / 3600}))


if __name__ == "__main__":
    main()
