"""Training backends behind one small interface: ``train(spec, out_dir, log)``.

``embedded`` runs in-process with torch + transformers (the toy world, CPU or one GPU);
``verl`` is the cluster engine for the paper grid.
"""

from __future__ import annotations

from types import SimpleNamespace


def _embedded():
    from scout.embedded.trainer import train  # deferred: a backend loads only when chosen

    return SimpleNamespace(train=lambda spec, out, log=print: train(spec, out, log=log))


def _verl():
    try:
        from scout.verl import driver
    except ImportError as exc:
        raise SystemExit(f"the 'verl' training backend needs verl (pip install '.[gpu]' on GPU nodes): {exc}") from exc
    return SimpleNamespace(train=driver.train)


BACKENDS = {"embedded": _embedded, "verl": _verl}


def get_backend(name: str):
    if name not in BACKENDS:
        raise SystemExit(f"unknown training backend {name!r}; expected one of {sorted(BACKENDS)}")
    return BACKENDS[name]()
