"""Node health checks before a job: NVML facts, GPU measurements, thresholds per GPU model."""

from trainstack.health.schema import Check, HealthReport, Status, worst

__all__ = ["Check", "HealthReport", "Status", "worst"]
