"""The kernels every template renders, pinned: a refactor of a renderer changes no kernel.

For each ``(workload, backend)`` pair of the registry: the seeds and :data:`N_SAMPLED` random
canonical genomes of the default problem, and the seeds of every other problem (dtypes, flags), on
the simulated device of the backend's kind (so the figures do not depend on this host). Each
rendered kernel is hashed with its launch parameters; the hashes of a pair are compared with
``tests/golden/renders.json``. A deliberate change of a kernel rewrites that file with
``ABEBOT_RENDER_GOLDEN=write python -m pytest tests/test_render_golden.py`` and shows in the diff.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
from pathlib import Path

import pytest

from core.search.operators import make_valid
from tests.helpers import SIMULATED_CPU, SIMULATED_GPU, _pairs, caps, label, problems, workload

GOLDEN = Path(__file__).parent / "golden" / "renders.json"
N_SAMPLED = 500
WRITE = os.environ.get("ABEBOT_RENDER_GOLDEN") == "write"


def rendered_hashes(name: str, backend: str) -> dict[str, str]:
    """``{genome hash @ problem: sha256 of (source, launch parameters)}`` for the pair's sample."""
    simulated = SIMULATED_CPU if caps(backend).device_kind == "cpu" else SIMULATED_GPU
    device = dataclasses.replace(simulated, backend=backend, multiprocessors=132 if simulated is SIMULATED_GPU else 8)
    out = {}
    for index, problem in enumerate(problems(name, backend, small=False)):
        tpl = workload(name).template(backend, problem, device)
        space = tpl.gene_space()
        rng = random.Random(label(name, backend, problem))
        genomes = dict.fromkeys(space.seed_genomes())
        seeds = len(genomes)
        for _ in range(20 * N_SAMPLED if index == 0 else 0):  # distinct canonical genomes (a small space has fewer)
            if len(genomes) >= seeds + N_SAMPLED:
                break
            child = make_valid(space.random(rng), space, rng)
            if child is not None:
                genomes[child] = None
        key = json.dumps(problem, sort_keys=True)
        for genome in genomes:
            kernel = tpl.render(genome)
            blob = json.dumps([kernel.source, kernel.entry, list(kernel.flags), kernel.launch, kernel.resources],
                              sort_keys=True, default=str)
            out[f"{genome.hash} @ {key}"] = hashlib.sha256(blob.encode()).hexdigest()[:16]
    return out


@pytest.mark.parametrize("name,backend", _pairs())
def test_rendered_kernels_match_the_pinned_hashes(name, backend):
    got = rendered_hashes(name, backend)
    pinned = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if WRITE:
        pinned[f"{name}/{backend}"] = got
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(pinned, indent=0, sort_keys=True) + "\n")
        return
    want = pinned.get(f"{name}/{backend}")
    assert want is not None, f"no pinned renders for {name}/{backend}: run with ABEBOT_RENDER_GOLDEN=write"
    changed = sorted(k for k in want if got.get(k) != want[k])
    assert not changed and got.keys() == want.keys(), (
        f"{len(changed)} of {len(want)} kernels differ from the pinned render, first: {changed[:3]}")
