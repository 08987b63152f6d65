"""Compatibility rules: data files shipped in the package, and the checks that read them."""

from trainstack.rules.data import (
    arch_cuda_missing,
    cuda_archs,
    cuda_variants,
    index_for,
    merged_rules,
    min_driver,
    nvcc_package,
    nvcc_refusal,
    os_pythons,
    pypi_default_variant,
    python_platform,
    shipped_rules,
    torch_minor,
    torch_pythons,
    vendor_local,
)
from trainstack.rules.schema import Rules

__all__ = [
    "Rules",
    "arch_cuda_missing",
    "cuda_archs",
    "cuda_variants",
    "index_for",
    "merged_rules",
    "min_driver",
    "nvcc_package",
    "nvcc_refusal",
    "os_pythons",
    "pypi_default_variant",
    "python_platform",
    "shipped_rules",
    "torch_minor",
    "torch_pythons",
    "vendor_local",
]
