"""Where the workflow's files are, relative to the working directory under the config's ``results``
folder: a run's and an evaluation's folders, the prepared data, and where a model is loaded from."""

from __future__ import annotations

from scout.config import results_root


def train_dir(config: dict, setting: str, variant: str, seed: int | str) -> str:
    return f"{results_root(config)}/train/{setting}/{variant}/s{seed}"


def eval_dir(config: dict, setting: str, variant: str, seed: int | str, ckpt: str) -> str:
    return f"{results_root(config)}/eval/{setting}/{variant}/s{seed}/{ckpt}"


def data_path(config: dict, name: str) -> str:
    folder = "toy/data" if config["world"] == "toy" else "data"
    return f"{results_root(config)}/{folder}/{name}.jsonl"


def meta_path(config: dict, name: str) -> str:
    return data_path(config, name).removesuffix(".jsonl") + ".meta.json"


def model_path(config: dict, model_id: str) -> str:
    """Where a model is loaded from: a hub id, a toy model folder, or a prepared teacher."""
    spec = config["models"][model_id]
    res = results_root(config)
    if "hub" in spec:
        return spec["hub"]
    if "toy" in spec:
        return f"{res}/toy/models/{model_id}"
    return f"{res}/teachers/{model_id}/model/final"


def model_inputs(config: dict, model_id: str) -> list[str]:
    """Files the DAG must build before a model can be used (none for hub models)."""
    spec = config["models"][model_id]
    res = results_root(config)
    if "toy" in spec:
        return [f"{res}/toy/models/{model_id}/model.safetensors"]
    if "prepare" in spec:
        return [f"{res}/teachers/{model_id}/train.json"]
    return []
