"""Write the expert's training corpora and decision transcripts for fixed seeds to a folder,
so that a change to the gold agent or the expert can be checked byte for byte.

Run from a checkout's root (its package is imported), once before and once after a change,
then compare::

    OMP_NUM_THREADS=1 python3 scripts/corpus_snapshot.py /tmp/before   # at the old commit
    OMP_NUM_THREADS=1 python3 scripts/corpus_snapshot.py /tmp/after
    diff -r /tmp/before /tmp/after && echo identical

Covers both bundled domains, every NoiseConfig and the clean expert, the policy switches
(none; restate_ids + email_first; + confirm_args) and three (episodes, seed, repeats) task
subsets of ``build_corpus``, plus ``decisions.gold_transcripts`` on the test and train
splits. About a minute on one core.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.getcwd())

import pytest_quantagent
from pytest_quantagent.training import decisions
from pytest_quantagent.training.data import build_corpus
from pytest_quantagent.training.expert import NOISE_CONFIGS

FLAGS: dict[str, dict[str, bool]] = {
    "plain": {},
    "restate_email": {"restate_ids": True, "email_first": True},
    "all": {"restate_ids": True, "email_first": True, "confirm_args": True},
}
SUBSETS = [(60, 7, 1), (40, 1001, 2), (30, 3, 3)]
"""(n_episodes, seed, repeats): each seed draws its own generated tasks."""


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    print("package:", Path(pytest_quantagent.__file__).parent, flush=True)  # the checkout's, not an install's
    noises = {**NOISE_CONFIGS, "clean": decisions.CLEAN}
    for dom in ("retail", "telecom"):
        for nname, noise in noises.items():
            for fname, flags in FLAGS.items():
                for n, seed, rep in SUBSETS:
                    texts, stats, pool = build_corpus(dom, noise, n_episodes=n, seed=seed, repeats=rep,
                                                      log=lambda _m: None, **flags)
                    tag = f"corpus_{dom}_{nname}_{fname}_{n}_{seed}_{rep}"
                    (out / f"{tag}.jsonl").write_text("\n".join(json.dumps(t) for t in texts))
                    (out / f"{tag}.stats.json").write_text(json.dumps(stats.__dict__, sort_keys=True))
                    (out / f"{tag}.pool.json").write_text(json.dumps(pool))
                    print(tag, f"{stats.kept}/{stats.episodes} kept, {stats.tempted_calls} tempted", flush=True)
        for fname, flags in FLAGS.items():
            for split in ("test", "train"):
                tx = decisions.gold_transcripts(dom, split=split, seeds=1, **flags)
                tag = f"gold_{dom}_{split}_{fname}"
                (out / f"{tag}.jsonl").write_text("\n".join(json.dumps(t) for t in tx))
                print(tag, len(tx), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
