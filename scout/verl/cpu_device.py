"""``torch.cuda``'s interface on the host, for verl's CPU platform (``scout.verl.cpu``): verl calls
get_torch_device().<fn> where it would call torch.cuda.<fn>. torch.cpu has some of them
(synchronize, current_stream, stream, Stream, Event, device_count, is_available); the rest are given
CPU meanings here: memory from the process and the host, RNG from torch's CPU generator, the rest
no-ops."""

from __future__ import annotations

import os
import types

import torch


def _host_memory() -> tuple[int, int]:
    """(available, total) bytes of host memory."""
    try:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)
    except ImportError:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        avail = os.sysconf("SC_AVPHYS_PAGES")
        return avail * size, pages * size


def _rss() -> int:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        return 0


class _CPUDeviceModule(types.ModuleType):
    """``torch.cpu`` plus what verl expects of ``torch.cuda``."""

    def __init__(self):
        super().__init__("verl_cpu_device")

    def __getattr__(self, name):  # everything torch.cpu has (Stream, Event, synchronize, ...)
        return getattr(torch.cpu, name)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def set_device(_device=None) -> None:
        return None

    @staticmethod
    def get_device_name(_device=None) -> str:
        return "CPU"  # a key of verl's FLOPs table (verl/utils/flops_counter.py:23)

    @staticmethod
    def synchronize(_device=None) -> None:
        return None

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def mem_get_info(_device=None) -> tuple[int, int]:
        return _host_memory()

    @staticmethod
    def set_per_process_memory_fraction(_fraction, _device=None) -> None:
        return None

    @staticmethod
    def memory_allocated(_device=None) -> int:
        return _rss()

    memory_reserved = max_memory_allocated = max_memory_reserved = memory_allocated

    @staticmethod
    def reset_peak_memory_stats(_device=None) -> None:
        return None

    @staticmethod
    def memory_stats(_device=None) -> dict:
        return {}

    @staticmethod
    def get_rng_state(_device=None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state, _device=None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed


DEVICE_MODULE = _CPUDeviceModule()
