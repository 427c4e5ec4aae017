"""What SCOUT's teacher costs in GPUs (scout.teacher_cost), worked out by hand, and the table
`scout plan` prints for the paper grid."""

from __future__ import annotations

import pytest
import yaml

from scout import plan
from scout import teacher_cost as tc
from scout.config import validate
from scout.grid import Grid
from tests.support.toy import REPO

QWEN3_4B = {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936}  # fmt: skip


def test_lora_parameters_by_hand():
    # per layer, rank x (in + out): q 2560+4096, k and v 2560+1024 each, o 4096+2560, gate and up
    # 2560+9728 each, down 9728+2560: 57,344; x 16 x 36 layers
    assert tc.lora_parameters(QWEN3_4B, 16) == 16 * 57_344 * 36 == 33_030_144
    assert tc.lora_parameters(QWEN3_4B, 8, ["q_proj", "v_proj"]) == 8 * (6656 + 3584) * 36


def test_trainer_state_sync_and_activations_by_hand():
    # a full 4.02B teacher: 16 B trained + 4 B reference = 80.4 GB; LoRA: 4 B base + 16 B x adapters
    assert tc.trainer_bytes(4.02e9) == pytest.approx(80.4e9)
    assert tc.trainer_bytes(4.02e9, 33e6) == pytest.approx(4.02e9 * 4 + 33e6 * 16)
    assert tc.sync_bytes(4.02e9) == pytest.approx(16.08e9) and tc.sync_bytes(4.02e9, 33e6) == pytest.approx(132e6)
    # 17,408 tokens x (6 x 151,936 + 2 x 2560 x 36 + 8 x 9728) bytes
    assert tc.activation_bytes(QWEN3_4B, 17_408) == 17_408 * (911_616 + 184_320 + 77_824)
    gib = tc.GIB
    assert tc.fits(8 * gib, 1 * gib, 1, 10)  # 9 GiB of 9 usable
    assert not tc.fits(8 * gib, 1.01 * gib, 1, 10)
    assert not tc.fits(8 * gib, 0, 0, 10)


def test_the_fewest_nodes_by_hand():
    """The 4B teacher on 8-GPU nodes of 40 GiB, 17,408-token micro-batches (19.0 GiB of activations,
    36 GiB usable): the full teacher's 80.4 GB over 4 GPUs (OPD's two nodes, the second split
    between engine and trainer) is 18.7 GiB a GPU: too much; over the third node's 8, 9.4: fits
    (the paper's three nodes). On the engine's 8 GPUs (shared) it fits OPD's two; a LoRA teacher
    fits them either way."""
    opts = {o.name: o for o in tc.options(4.02, QWEN3_4B, 17_408, 3, 8, 40)}
    assert opts["full teacher, own pool"].nodes == 3 and opts["full teacher, own pool"].trainer_gpus == 8
    assert opts["full teacher, shared"].nodes == 2 and opts["full teacher, shared"].trainer_gpus == 8
    assert opts["LoRA r16 teacher, own pool"].nodes == 2 and opts["LoRA r16 teacher, own pool"].trainer_gpus == 4
    assert opts["LoRA r16 teacher, shared"].nodes == 2
    two = tc._option("x", 2, 8, 40, 4.02e9, 0, False, tc.activation_bytes(QWEN3_4B, 17_408))
    assert not two.fits and two.state_gib_per_gpu == pytest.approx(80.4e9 / 4 / tc.GIB)
    assert opts["LoRA r16 teacher, shared"].sync_mib == pytest.approx(33_030_144 * 4 / 2**20)


def test_where_opd_runs_on_one_node_the_search_starts_there():
    """OPD on one node of 8 (docs/real-models.md's one-node overlay): a rank-16 LoRA teacher fits it, on its own
    quarter (16.6 GB over 2 GPUs: 7.7 GiB + 19.0) or on the engine's half (3.9 GiB + 19.0 a GPU);
    a full teacher shared over 4 GPUs is 18.7 + 19.0 > 36 GiB, so it takes OPD's two nodes again, and
    on a pool of its own three."""
    opts = {o.name: o for o in tc.options(4.02, QWEN3_4B, 17_408, 1, 8, 40, opd_nodes=1)}
    assert (opts["LoRA r16 teacher, shared"].nodes, opts["LoRA r16 teacher, shared"].trainer_gpus) == (1, 4)
    assert (opts["LoRA r16 teacher, own pool"].nodes, opts["LoRA r16 teacher, own pool"].trainer_gpus) == (1, 2)
    assert opts["full teacher, shared"].nodes == 2 and opts["full teacher, own pool"].nodes == 3
    # nodes of 2 GPUs: one cannot hold three pools (skipped, not an error); the full teacher's 80.4 GB
    # then needs 4 trainer GPUs (18.7 GiB each), the trainer's two whole nodes of 4
    small = tc.fewest_nodes("x", 2, 40, 4.02e9, 0, False, 0.0, least=1)
    assert (small.nodes, small.trainer_gpus) == (4, 4)


def test_scout_plan_costs_the_paper_grids_teachers():
    cfg = validate(yaml.safe_load((REPO / "config" / "paper.yaml").read_text()))
    table = plan.teacher_options(Grid.of(cfg))
    q8 = table[table.setting == "q8b-q1.7b-math"].set_index("option")
    assert q8.loc["OPD", "gpus"] == 16 and q8.loc["OPD", "gpu_hours"] == 16 * 2880 / 60
    assert q8.loc["full teacher, own pool (configured)", "nodes"] == 4  # the paper's placement
    assert q8.loc["full teacher, own pool", "nodes"] == 4 and q8.loc["full teacher, shared", "nodes"] == 3
    assert q8.loc["LoRA r16 teacher, shared", "nodes"] == 2 and q8.loc["LoRA r16 teacher, shared", "fits"] == "yes"
    text = plan.render_teacher_options(Grid.of(cfg))
    assert text.startswith("SCOUT's teacher: GPUs per training job") and "sky7b-ds1.5b-math" in text
    toy = validate(yaml.safe_load((REPO / "config" / "config.yaml").read_text()))
    assert plan.render_teacher_options(Grid.of(toy)) == ""  # the toy world gives no sizes


def test_a_served_teachers_throughput_by_hand():
    """A 4B teacher on 8 GPUs: 8 x 312e12 x 0.4 / (2 x 4e9) = 124,800 tokens a second; a student
    step of 128 sequences at half of 1,024 + 16,384 tokens (1,114,112) every 538.3 s: 60 students."""
    rate = tc.scored_tokens_per_second(4e9, 8)
    assert rate == pytest.approx(124_800)
    assert tc.students_per_server(rate, 128 * 0.5 * (1024 + 16384), 538.3) == 60
    assert tc.students_per_server(rate, 1e12, 1.0) == 1  # a server always serves at least one


def test_scout_plan_costs_a_server_per_teacher_against_an_engine_per_job():
    """The paper grid's frozen-teacher jobs (OPD, ESR, Prune-OPD, OPTR and their variants): 2-node
    jobs give their teacher's node back, 1-node jobs half their GPUs; each teacher gets one node."""
    paper = validate(yaml.safe_load((REPO / "config" / "paper.yaml").read_text()))
    table = plan.teacher_servers(Grid.of(paper)).set_index("teacher")
    assert list(table.index) == ["Qwen3-4B-Instruct-2507", "Qwen3-8B-DAPO", "Skywork-OR1-Math-7B"]
    assert table["jobs"].to_dict() == {"Qwen3-4B-Instruct-2507": 25, "Qwen3-8B-DAPO": 9, "Skywork-OR1-Math-7B": 9}
    q8 = table.loc["Qwen3-8B-DAPO"]  # opd and esr on 2 nodes, prune_opd on 1; 3 seeds, 48 h each
    assert q8["gpu_hours_own_engines"] == 3 * 48 * (16 + 16 + 8)
    assert q8["gpu_hours_one_server"] == 3 * 48 * (8 + 8 + 4) + 8 * 48  # the students, and one server node
    assert (table["waves"] == 1).all() and (table["students_per_server"] >= table["jobs"]).all()
    text = plan.render_teacher_servers(Grid.of(paper))
    assert "29,568 GPU-hours with an engine each, 16,512 with one server per teacher (13,056 fewer" in text
