"""Where a cluster cell's roles sit: the GPU pools of the student, the teacher's engine and SCOUT's
teacher trainer, from the job's nodes and GPUs per node (SPEC section 3).

A pure rule, apart from any backend: the planner sizes jobs and costs teachers with it, and the
verl backend places its resource pools by it.
"""

from __future__ import annotations

from scout.methods import METHODS


class PlacementError(ValueError):
    """A job's GPUs cannot hold its method's pools."""


def placement(method_id: str, res: dict) -> dict:
    """Nodes and GPUs per node of the three pools: the student (actor, rollout, reference), the
    teacher's inference engine (scores the student; SCOUT also samples continuations from it) and,
    for SCOUT, the teacher's trainer. With enough nodes each pool has whole nodes (the student
    one, the engine one, the trainer the rest); otherwise they split a node's GPUs.

    ``res["teacher_trainer"] == "shared"``: the teacher's trainer sits on the engine's pool (the
    engine sleeps while it trains), the pools are OPD's and ``train_shared`` is set.
    ``res["teacher_served"]`` (``served_resources``): the teacher is a server, the student has it all.
    A pool the method needs that would get no GPU is refused here, not by verl on a GPU node."""
    pools = _pools(method_id, res)
    for key, role in (("student", "its student"), ("teacher", "its teacher's engine"), ("train", "its teacher's trainer")):
        if (key == "student" or pools[f"{key}_nodes"]) and pools[f"{key}_gpus"] < 1:  # a pool it has, empty
            raise PlacementError(
                f"{method_id} on {res['nodes']} node(s) of {res['gpus_per_node']} GPU(s) leaves {role} no GPU; "
                "give it more GPUs a node or more nodes"
            )
    return pools


def _pools(method_id: str, res: dict) -> dict:
    nodes, gpus = res["nodes"], res["gpus_per_node"]
    m = METHODS[method_id]
    out = {"student_nodes": nodes, "student_gpus": gpus, "teacher_nodes": 0, "teacher_gpus": 0}
    out |= {"train_nodes": 0, "train_gpus": 0, "train_shared": False}
    if not m.needs_teacher or (res.get("teacher_served") and m.scores_with_frozen_teacher):
        return out
    if m.trains_teacher and res.get("teacher_trainer") == "shared":  # default own (the schema)
        opd = _pools("opd", res)
        return opd | {"train_nodes": opd["teacher_nodes"], "train_gpus": opd["teacher_gpus"], "train_shared": True}
    if not m.trains_teacher:
        if nodes == 1:
            return out | {
                "student_nodes": 1,
                "student_gpus": gpus - gpus // 2,
                "teacher_nodes": 1,
                "teacher_gpus": gpus // 2,
            }
        return out | {"student_nodes": 1, "teacher_nodes": nodes - 1, "teacher_gpus": gpus}
    if nodes >= 3:
        return out | {
            "student_nodes": 1,
            "teacher_nodes": 1,
            "teacher_gpus": gpus,
            "train_nodes": nodes - 2,
            "train_gpus": gpus,
        }
    if nodes == 2:
        half = gpus // 2
        return out | {
            "student_nodes": 1,
            "teacher_nodes": 1,
            "teacher_gpus": half,
            "train_nodes": 1,
            "train_gpus": gpus - half,
        }
    quarter = gpus // 4
    if quarter < 1:
        raise PlacementError(
            f"{method_id} on one node needs at least 4 GPUs (student, teacher engine, teacher trainer)"
        )
    return out | {
        "student_nodes": 1, "student_gpus": gpus - 2 * quarter,
        "teacher_nodes": 1, "teacher_gpus": quarter, "train_nodes": 1, "train_gpus": quarter,
    }  # fmt: skip


def served_resources(method_id: str, res: dict) -> dict:
    """The resources of a cell whose teacher is served (``scout.teacher_server``): its student's
    pool of the configured placement, so that sharing a server frees the engine's GPUs."""
    pools = placement(method_id, res)
    return {**res, "nodes": pools["student_nodes"], "gpus_per_node": pools["student_gpus"], "teacher_served": True}
