"""rkv.ray.Generator on a two-node Ray cluster started on this machine: a pass@k job over
MATH-500 problems whose greedy outputs equal the single-process ones, and which loses no
row when an actor dies mid-job (Ray restarts it and reruns its batch)."""

import os
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason='Ray is an optional dependency: pip install "rkv[ray]"')
from ray.cluster_utils import Cluster  # noqa: E402

import rkv.ray  # noqa: E402
from rkv import LLM, SamplingParams  # noqa: E402
from rkv.math_eval import grade, r1_prompt, read_math_problems  # noqa: E402

HERE = Path(__file__).resolve().parent
PROBLEMS = 4
SAMPLING = {"n": 2, "temperature": 0.0, "max_tokens": 48}
COMPRESSION = {"policy": "rkv", "budget": 64, "buffer": 16}


@pytest.fixture(scope="module")
def cluster():
    # Workers import the test's helper module; they inherit this environment.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "include_dashboard": False},
    )
    c.add_node(num_cpus=2)
    ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    yield c
    ray.shutdown()
    c.shutdown()


@pytest.fixture(scope="module")
def rows(math500):
    problems = read_math_problems(str(math500), limit=PROBLEMS)
    return [
        {"id": p["index"], "gold": p["gold"], "messages": [{"role": "user", "content": r1_prompt(p["problem"])}]}
        for p in problems
    ]


@pytest.fixture(scope="module")
def single_process(rows):
    llm = LLM(threads=2, kv_compression=COMPRESSION)
    try:
        outs = llm.chat([r["messages"] for r in rows], SamplingParams(**SAMPLING), use_tqdm=False)
        return {r["id"]: [c.text for c in o.outputs] for r, o in zip(rows, outs)}
    finally:
        llm.shutdown()


def run_job(rows, generator, **kwargs):
    ds = ray.data.from_items(rows).repartition(len(rows))
    out = ds.map_batches(
        generator,
        fn_constructor_kwargs={
            "sampling_params": SAMPLING,
            "kv_compression": COMPRESSION,
            "kv_memory": "64MiB",
            "threads": 1,
            **kwargs,
        },
        concurrency=2,
        num_cpus=1,
        batch_size=1,
        **rkv.ray.RETRY,
    )
    return out.take_all()


def test_pass_at_k_over_the_cluster_equals_one_process(cluster, rows, single_process):
    got = run_job(rows, rkv.ray.Generator)
    assert sorted(r["id"] for r in got) == sorted(r["id"] for r in rows)
    for r in got:
        # Input columns are kept; n=2 gives two samples per row.
        assert r["gold"] and r["messages"]
        assert list(r["generated_text"]) == single_process[r["id"]]
        assert len(r["generated_token_ids"]) == 2 and len(r["kv"]) == 2
        assert r["kv"][0]["policy"] == "rkv" and r["kv"][0]["budget"] == 64
        assert list(r["num_generated_tokens"]) == [len(t) for t in r["generated_token_ids"]]
    # pass@k with rkv's grader runs over the job's rows.
    passed = [any(grade(t, r["gold"])[0] for t in r["generated_text"]) for r in got]
    assert len(passed) == len(rows)


def test_no_row_is_lost_when_an_actor_dies(cluster, rows, single_process, tmp_path):
    sys.path.insert(0, str(HERE))
    from ray_helpers import DiesOnce

    marker = tmp_path / "died"
    got = run_job(rows, DiesOnce, marker=str(marker))
    assert marker.exists(), "no actor died: the test proved nothing"
    assert sorted(r["id"] for r in got) == sorted(r["id"] for r in rows)
    for r in got:
        assert list(r["generated_text"]) == single_process[r["id"]]


def test_a_batch_without_prompts_names_the_columns():
    g = rkv.ray.Generator.__new__(rkv.ray.Generator)
    g.sampling_params = SamplingParams()
    with pytest.raises(ValueError, match="'prompt' or 'messages'"):
        g({"text": ["x"]})
