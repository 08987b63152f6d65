"""Pure parts of the report: drift, NVML reading (through a stand-in), version matching, a recorded probe."""

from __future__ import annotations

from types import SimpleNamespace

from trainstack.verify.drift import compute_drift, same_version
from trainstack.verify.gpus import read_gpus
from trainstack.verify.report import from_probe


def test_drift_missing_different_extra() -> None:
    drift = compute_drift(
        {"Torch": "2.11.0+cu128", "numpy": "2.3.0", "flash_attn": "2.8.3"},
        {"torch": "2.11.0+cu128", "numpy": "2.3.1", "pip": "24", "einops": "0.8"},
        "lock",
    )
    assert drift.missing == ["flash-attn"]
    assert [(d.name, d.locked, d.installed) for d in drift.different] == [("numpy", "2.3.0", "2.3.1")]
    assert drift.extra == ["einops"]


def test_local_label_on_one_side_only_is_the_same_version() -> None:
    assert same_version("2.11.0", "2.11.0+cu128")
    assert not same_version("2.11.0+cu126", "2.11.0+cu128")
    assert not same_version("2.11.0", "2.11.1")


class NvmlError(Exception):
    pass


class StandInNvml:
    """No NVML on this machine: a stand-in with the calls read_gpus makes, returning NVML's types.
    Name, driver, compute capability and memory are what an H200 machine reported (nvidia-smi
    for the driver, torch for the memory); the CUDA driver version and UUID are illustrative."""

    def __init__(self, fail: str | None = None) -> None:
        self.fail = fail
        self.shut = False

    def nvmlInit(self) -> None:
        if self.fail:
            raise NvmlError(self.fail)

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.159.04"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(total=150109880320, free=0, used=0)

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-0000000{handle}"


def test_nvml_values_on_the_schema() -> None:
    nvml = StandInNvml()
    info = read_gpus(nvml)
    assert (info.driver, info.cuda_driver, info.reason) == ("580.159.04", "13.0", "")
    assert [(g.index, g.name, g.capability, g.memory_mib) for g in info.gpus] == [(0, "NVIDIA H200", "9.0", 143155)]
    assert nvml.shut


def test_nvml_without_driver_gives_not_found_with_reason() -> None:
    info = read_gpus(StandInNvml(fail="NVML Shared Library Not Found"))
    assert info.driver == "not found" and info.gpus == []
    assert info.reason == "NVML: NVML Shared Library Not Found"


def test_nvml_on_this_machine_never_raises() -> None:
    info = read_gpus()
    assert info.gpus or info.reason


# report_probe.py's output on an H200 machine (torch 2.11.0+cu130 and the nvidia wheels in a venv, driver 580.159.04),
# recorded after the probe's conv initialised cuDNN; the package list is shortened.
H200_PROBE = {'os': {'name': 'Ubuntu 24.04.3 LTS', 'kernel': '6.18.44-fc-v973-gpu', 'machine': 'x86_64'},
 'libc': {'name': 'glibc', 'version': '2.39'},
 'python': {'version': '3.12.3',
            'implementation': 'CPython',
            'executable': '/opt/torch/.venv/bin/python3',
            'prefix': '/opt/torch/.venv',
            'base_prefix': '/usr',
            'is_venv': True},
 'packages': {'torch': '2.11.0',
              'numpy': '2.5.2',
              'triton': '3.6.0',
              'nvidia-cudnn-cu13': '9.19.0.56',
              'nvidia-nccl-cu13': '2.28.9'},
 'env': {'LD_LIBRARY_PATH': '/usr/local/nvidia/lib64:/usr/local/nvidia/lib'},
 'torch': {'version': '2.11.0+cu130',
           'path': '/opt/torch/.venv/lib/python3.12/site-packages/torch',
           'cuda': '13.0',
           'hip': None,
           'debug': False,
           'arch_list': ['sm_75', 'sm_80', 'sm_86', 'sm_90', 'sm_100', 'sm_120'],
           'cuda_available': True,
           'device_count': 1,
           'devices': [{'name': 'NVIDIA H200', 'capability': '9.0', 'memory': 150109880320}]},
 'cudnn': {'compiled': '9.19.0',
           'runtime': '9.19.0',
           'loaded': ['/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn.so.9',
                      '/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn_engines_precompiled.so.9',
                      '/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn_engines_runtime_compiled.so.9',
                      '/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn_graph.so.9',
                      '/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cudnn/lib/libcudnn_heuristic.so.9']},
 'nccl': {'compiled': '2.28.9',
          'runtime': '2.28.9',
          'loaded': ['/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2'],
          'cuda_loaded': ['/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublas.so.13',
                          '/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcublasLt.so.13',
                          '/opt/torch/.venv/lib/python3.12/site-packages/nvidia/cu13/lib/libcudart.so.13',
                          '/usr/local/nvidia/lib64/libcuda.so.580.159.04']},
 'errors': {}}


def test_recorded_gpu_probe_maps_onto_the_schema() -> None:
    gpus = read_gpus(StandInNvml())
    report = from_probe(H200_PROBE, "/opt/torch/.venv/bin/python3", {}, gpus)
    assert report.torch.cuda_available is True and report.torch.devices == ["NVIDIA H200 (sm_90)"]
    assert (report.cudnn.compiled, report.cudnn.runtime) == ("9.19.0", "9.19.0")
    loaded = [path.rsplit("/", 1)[-1] for path in report.cudnn.loaded]
    assert "libcudnn_engines_precompiled.so.9" in loaded and "libcudnn_heuristic.so.9" in loaded
    assert report.nccl.loaded[0].endswith("libnccl.so.2")
    assert any("libcuda.so." in path for path in report.cuda_libraries)
    assert report.allocator_env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64:/usr/local/nvidia/lib"
    assert report.allocator_env["PYTORCH_CUDA_ALLOC_CONF"] == "not set"
    assert report.python.is_venv is True and report.libc.version == "2.39"
